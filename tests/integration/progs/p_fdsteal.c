/* p_fdsteal FILE: allocates (the trace is created), closes every descriptor
 * from 3 up as daemons and closefrom() do, opens FILE (gets a low number),
 * writes 19 bytes, then makes 200000 small allocations (many new trace
 * chunks). FILE must still hold exactly its 19 bytes: the shim may never
 * write through a descriptor it no longer owns. Prints "fd=N size=S". */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "prog_util.h"

int
main(int argc, char **argv)
{
    if (argc != 2) {
        printf("FAIL: usage\n");
        return 3;
    }
    void *p;
    OK(cudaMalloc(&p, 100));
    for (int fd = 3; fd < 4096; fd++)
        close(fd);
    int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, "important app data\n", 19) != 19) {
        printf("FAIL: open/write\n");
        return 3;
    }
    for (int i = 0; i < 200000; i++) {
        void *q;
        OK(cudaMalloc(&q, 512));
        OK(cudaFree(q));
    }
    struct stat st;
    fstat(fd, &st);
    printf("fd=%d size=%lld\n", fd, (long long)st.st_size);
    return 0;
}
