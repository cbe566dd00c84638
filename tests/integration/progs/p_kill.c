/* p_kill: pushes "kill.range", makes N cudaMalloc of 512*(i+1) bytes
 * (i = 0..N-1, addresses 0x7e0000000000 + 512*i*(i+1)/2), never frees, then
 *   p_kill self N   raise(SIGKILL)
 *   p_kill wait N   print "READY", wait to be killed (exits 3 after 60 s). */
#include <signal.h>
#include <nvtx3/nvToolsExt.h>
#include <string.h>

#include "prog_util.h"

int
main(int argc, char **argv)
{
    if (argc != 3) {
        printf("FAIL: usage\n");
        return 3;
    }
    int n = atoi(argv[2]);
    nvtxRangePushA("kill.range");
    for (int i = 0; i < n; i++) {
        void *p;
        OK(cudaMalloc(&p, (size_t)512 * (i + 1)));
    }
    printf("READY\n");
    fflush(stdout);
    if (strcmp(argv[1], "self") == 0)
        raise(SIGKILL);
    sleep(60);
    return 3;
}
