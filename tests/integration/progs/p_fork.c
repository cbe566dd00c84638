/* p_fork: parent cudaMalloc(1 MiB) -> 0x7e0000000000; fork; the child
 * cudaMalloc(2 MiB) -> 0x7e0000100000, frees it, exits 0; the parent waits,
 * then cudaMalloc(3 MiB) -> 0x7e0000100000, frees both.
 * Output: "parent pid=P child=C" and "child pid=C ppid=P".
 * `p_fork _exit`: the child leaves through _exit(0), as Python's
 * multiprocessing workers do (no exit handlers run); `p_fork _exit3`:
 * through _exit(3); `p_fork _Exit5`: through _Exit(5); `p_fork kill`: the
 * child kills itself with SIGKILL. The parent checks the child ended so. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "prog_util.h"

int
main(int argc, char **argv)
{
    void *a, *b, *c;
    OK(cudaMalloc(&a, 1048576));
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        printf("FAIL: fork\n");
        return 3;
    }
    if (pid == 0) {
        OK(cudaMalloc(&b, 2097152));
        OK(cudaFree(b));
        printf("child pid=%d ppid=%d b=%p\n", (int)getpid(), (int)getppid(), b);
        fflush(stdout);
        const char *how = argc > 1 ? argv[1] : "";
        if (!strcmp(how, "_exit"))
            _exit(0);
        if (!strcmp(how, "_exit3"))
            _exit(3);
        if (!strcmp(how, "_Exit5"))
            _Exit(5);
        if (!strcmp(how, "kill"))
            kill(getpid(), SIGKILL);
        exit(0);
    }
    int st = 0, want = argc > 1 && !strcmp(argv[1], "_exit3") ? 3
                     : argc > 1 && !strcmp(argv[1], "_Exit5") ? 5 : 0;
    waitpid(pid, &st, 0);
    int killed = argc > 1 && !strcmp(argv[1], "kill");
    if (killed ? !(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)
               : !WIFEXITED(st) || WEXITSTATUS(st) != want) {
        printf("FAIL: child status %#x\n", st);
        return 3;
    }
    OK(cudaMalloc(&c, 3145728));
    OK(cudaFree(c));
    OK(cudaFree(a));
    printf("parent pid=%d child=%d a=%p c=%p\n", (int)getpid(), (int)pid, a, c);
    printf("done\n");
    return 0;
}
