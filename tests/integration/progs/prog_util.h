/* prog_util.h: helpers for the integration test programs. Each program
 * prints what the test needs to cross-check (pointers, tids, range ids) on
 * stdout as "key=value" lines, and exits 0 when every CUDA call returned
 * what the program expected (else prints "FAIL: ..." and exits 3). */
#ifndef ITEST_PROG_UTIL_H
#define ITEST_PROG_UTIL_H

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#define EXPECT_RC(call, want)                                                      \
    do {                                                                           \
        int rc_ = (int)(call);                                                     \
        if (rc_ != (int)(want)) {                                                  \
            printf("FAIL: %s:%d: %s returned %d, expected %d\n", __FILE__, __LINE__, \
                   #call, rc_, (int)(want));                                       \
            fflush(stdout);                                                        \
            exit(3);                                                               \
        }                                                                          \
    } while (0)

#define OK(call) EXPECT_RC(call, 0)

static inline int
prog_gettid(void)
{
    return (int)syscall(SYS_gettid);
}

#define STREAM(v) ((cudaStream_t)(uintptr_t)(v))

#endif
