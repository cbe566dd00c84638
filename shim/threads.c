/* threads.c: thread names, re-recorded when they change. PyTorch names its
 * backward worker pt_autograd_<dev> (c10::setThreadName, [PT] in docs/sources.md);
 * both ways Linux renames a thread are hooked, so no syscall per event. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/prctl.h>

#include "record.h"
#include "resolve.h"
#include "writer.h"

static void
record_rename(pthread_t thread, const char *name)
{
    if (t_rs.guard || rs_writer_state() != RS_W_OPEN || !name)
        return;
    t_rs.guard++;
    uint32_t tid = pthread_equal(thread, pthread_self()) ? rs_gettid() : 0;
    rs_record_thread(tid, (uint64_t)thread, name, 1);
    t_rs.guard--;
}

RS_EXPORT int
pthread_setname_np(pthread_t thread, const char *name)
{
    __typeof__(&pthread_setname_np) real = RS_REAL(pthread_setname_np);
    if (!real)
        return ENOSYS;
    int rc = real(thread, name);
    if (rc == 0)
        record_rename(thread, name);
    return rc;
}

RS_EXPORT int
prctl(int option, ...)
{
    va_list ap;
    va_start(ap, option);
    unsigned long a2 = va_arg(ap, unsigned long);
    unsigned long a3 = va_arg(ap, unsigned long);
    unsigned long a4 = va_arg(ap, unsigned long);
    unsigned long a5 = va_arg(ap, unsigned long);
    va_end(ap);
    __typeof__(&prctl) real = RS_REAL(prctl);
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    int rc = real(option, a2, a3, a4, a5);
    if (rc == 0 && option == PR_SET_NAME)
        record_rename(pthread_self(), (const char *)a2);
    return rc;
}
