/* p_exec: allocates 1 MiB, then exec()s itself as "p_exec second", which
 * allocates 2 MiB. Both programs have the same pid: each must get its own
 * trace, the first closed by the exec (not left as "killed"). */
#include <string.h>
#include <unistd.h>

#include "prog_util.h"

int
main(int argc, char **argv)
{
    void *p;
    if (argc > 1 && strcmp(argv[1], "second") == 0) {
        OK(cudaMalloc(&p, 2u << 20));
        printf("second pid=%d\n", (int)getpid());
        return 0;
    }
    OK(cudaMalloc(&p, 1u << 20));
    printf("first pid=%d\n", (int)getpid());
    fflush(stdout);
    char *args[] = {argv[0], (char *)"second", NULL};
    execv(argv[0], args);
    printf("FAIL: execv returned\n");
    return 3;
}
