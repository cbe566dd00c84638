/* killhdr.c: preloaded before the shim, kills the process in the middle of
 * the trace file's creation, to check that such a kill leaves no file that
 * looks like a (damaged) trace. RS_KILL_AT selects the point:
 *   fallocate  the file exists, its header is not written (the first
 *              4 KiB posix_fallocate at offset 0: the header's);
 *   rename     the header is complete, the file not yet named.
 * Any other call is forwarded to the next definition. */
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

static int
kill_at(const char *point)
{
    const char *v = getenv("RS_KILL_AT");
    return v && !strcmp(v, point);
}

EXPORT int
posix_fallocate(int fd, off_t off, off_t len)
{
    if (off == 0 && len == 4096 && kill_at("fallocate"))
        raise(SIGKILL);
    int (*next)(int, off_t, off_t) = (int (*)(int, off_t, off_t))dlsym(RTLD_NEXT,
                                                                     "posix_fallocate");
    return next(fd, off, len);
}

EXPORT int
renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
          unsigned int flags)
{
    if (kill_at("rename"))
        raise(SIGKILL);
    int (*next)(int, const char *, int, const char *, unsigned int) =
        (int (*)(int, const char *, int, const char *, unsigned int))dlsym(RTLD_NEXT,
                                                                          "renameat2");
    return next(olddirfd, oldpath, newdirfd, newpath, flags);
}
