/* hooks_exec.c: exec replaces the program without running destructors, so
 * the trace would be left "not closed" (read as a killed job) and the new
 * program, same pid, could not create its own file. Close it first. glibc's
 * execl* family calls execve inside libc, where no hook sees it: those execs
 * leave the trace unclosed (readable; the reader warns). */
#include <errno.h>
#include <unistd.h>

#include "record.h"
#include "resolve.h"
#include "writer.h"

#define EXEC_HOOK(name, program, ...)                                                           \
    __typeof__(&name) real = RS_REAL(name);                                                   \
    if (!real) {                                                                              \
        errno = ENOSYS;                                                                       \
        return -1;                                                                            \
    }                                                                                         \
    int closed = !t_rs.guard && rs_writer_before_exec(program);                               \
    int rc = real(__VA_ARGS__);                                                               \
    int e = errno;                                                                            \
    if (closed)                                                                               \
        rs_writer_after_failed_exec();                                                        \
    errno = e;                                                                                \
    return rc

RS_EXPORT int
execve(const char *pathname, char *const argv[], char *const envp[])
{
    EXEC_HOOK(execve, pathname, pathname, argv, envp);
}

RS_EXPORT int
execv(const char *path, char *const argv[])
{
    EXEC_HOOK(execv, path, path, argv);
}

RS_EXPORT int
execvp(const char *file, char *const argv[])
{
    EXEC_HOOK(execvp, file, file, argv);
}

RS_EXPORT int
execvpe(const char *file, char *const argv[], char *const envp[])
{
    EXEC_HOOK(execvpe, file, file, argv, envp);
}

RS_EXPORT int
fexecve(int fd, char *const argv[], char *const envp[])
{
    (void)0;
    EXEC_HOOK(fexecve, "(fexecve)", fd, argv, envp);
}
