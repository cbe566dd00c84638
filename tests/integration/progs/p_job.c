/* p_job: one rank of a simulated job, to run several at the same time.
 * cudaMalloc(1 MiB), prints "READY", waits until the file argv[1] exists
 * (polls every 10 ms, gives up after 30 s: exit 3), cudaFree, exits 0.
 * Without an argument it does not wait. */
#include <unistd.h>

#include "prog_util.h"

int
main(int argc, char **argv)
{
    void *a;
    OK(cudaMalloc(&a, 1048576));
    printf("READY\n");
    fflush(stdout);
    for (int i = 0; argc > 1 && access(argv[1], F_OK) != 0; i++) {
        if (i == 3000)
            return 3;
        usleep(10000);
    }
    OK(cudaFree(a));
    printf("done\n");
    return 0;
}
