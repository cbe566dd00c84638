/* hooks_exec.c: exec replaces the program without running destructors, so
 * the trace would be left "not closed" (read as a killed job) and the new
 * program, same pid, could not create its own file. Close it first. glibc's
 * execl* family calls execve inside libc, where no hook sees it: those execs
 * leave the trace unclosed (readable; the reader warns). */
#include <errno.h>
#include <stdlib.h>
#include <sys/syscall.h>
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

/* _exit and _Exit run no exit handler and no destructor: without these
 * hooks the trace of a process that leaves through them (Python's
 * os._exit, multiprocessing's forked workers) stays not closed and reads
 * exactly like a killed one. Each seals the trace first with how the
 * process left and its status (rs_writer_exit: async-signal-safe, no
 * lock, no allocation), then leaves through the real function. glibc's
 * exit() reaches its own _exit inside libc, where no hook sees it: the
 * destructor has closed the trace by then. The real functions are
 * resolved at load (below), never here: resolving takes the loader's
 * lock and may allocate; should they be missing, the process leaves with
 * the exit_group system call, what glibc's _exit makes (_exit(2)). */
__attribute__((noreturn)) static void
leave(int api, int status)
{
    void (*real)(int) = (void (*)(int))__atomic_load_n(&rs_real_table[api], __ATOMIC_ACQUIRE);
    if (real)
        real(status);
    for (;;)
        syscall(SYS_exit_group, status);
}

RS_EXPORT void
_exit(int status)
{
    rs_writer_exit(RS_EXIT__EXIT, status);
    leave(RS_API__exit, status);
}

RS_EXPORT void
_Exit(int status)
{
    rs_writer_exit(RS_EXIT__EXIT_C, status);
    leave(RS_API__Exit, status);
}

/* Resolve the real _exit and _Exit while loading, when resolving is safe. */
__attribute__((constructor)) static void
resolve_exit_hooks(void)
{
    t_rs.guard++;
    rs_real(RS_API__exit);
    rs_real(RS_API__Exit);
    t_rs.guard--;
}
