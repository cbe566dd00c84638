/* run_dump.c: run the built recomp-dump on a file and capture its output. */
#include "run_dump.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char *
slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *s = malloc(cap);
    for (size_t k; s && (k = fread(s + n, 1, cap - n - 1, f)) > 0;) {
        n += k;
        if (cap - n - 1 == 0) {
            char *t = realloc(s, cap * 2);
            if (!t) {
                free(s);
                s = NULL;
                break;
            }
            s = t;
            cap *= 2;
        }
    }
    fclose(f);
    if (s)
        s[n] = '\0';
    return s;
}

int
run_dump(const char *tool, const char *trace, char **out, char **err)
{
    char opath[] = "/tmp/rs-dump-out-XXXXXX", epath[] = "/tmp/rs-dump-err-XXXXXX";
    int ofd = mkstemp(opath), efd = mkstemp(epath);
    if (ofd < 0 || efd < 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(ofd, 1);
        dup2(efd, 2);
        execl(tool, tool, trace, (char *)NULL);
        _exit(127);
    }
    close(ofd);
    close(efd);
    int st = -1;
    if (pid < 0 || waitpid(pid, &st, 0) < 0)
        st = -1;
    if (out)
        *out = slurp(opath);
    if (err)
        *err = slurp(epath);
    unlink(opath);
    unlink(epath);
    if (st == -1 || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}
