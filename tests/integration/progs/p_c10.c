/* p_c10: PyTorch's allocator report through the libc10_cuda doubles
 * (tests/doubles/c10*.cpp): CUDA blocks, CPU blocks and another device
 * type, with both signatures. argv[1] = "cpu": only CPU calls, nothing
 * else (no trace file may appear). Prints every call the real functions
 * saw as "realN ..." / "real_i64N ..." lines and the counters. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "c10_double.h"

#define P(x) ((void *)(uintptr_t)(x))

static void
print_log(const char *name, const c10_double_call *log, long n)
{
    for (long i = 0; i < n && i < C10_DOUBLE_LOG; i++)
        printf("%s%ld ptr=%p size=%" PRId64 " alloc=%" PRIu64 " reserved=%" PRIu64 " type=%d index=%d\n", name, i,
               log[i].ptr, log[i].size, log[i].total_allocated, log[i].total_reserved, log[i].type, log[i].index);
}

int
main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "cpu")) {
        c10cuda_block(P(0x1000), 4096, 4096, 8192, 0, -1);
        c10cuda_block(P(0x1000), -4096, 0, 8192, 0, -1);
        c10cuda_i64_block(P(0x3000), 64, 64, 64, 0, -1);
    } else {
        c10cuda_block(P(0x7e0000000000), 2097152, 2097152, 20971520, 1, 0);
        c10cuda_block(P(0x7e0000200000), 512, 2097664, 20971520, 1, 0);
        c10cuda_block(P(0x1000), 4096, 4096, 8192, 0, -1);            /* CPU */
        c10cuda_block(P(0x7e0000000000), -2097152, 512, 20971520, 1, 0);
        c10cuda_block(P(0x7f0000000000), 1048576, 1048576, 2097152, 1, 3);
        c10cuda_block(P(0x2000), 128, 128, 128, 11, 0);               /* another device type */
        c10cuda_i64_block(P(0x7e0000400000), 4194304, 4194816, 20971520, 1, 0);
        c10cuda_i64_block(P(0x3000), 64, 64, 64, 0, -1);              /* CPU */
        c10cuda_i64_block(P(0x7e0000400000), -4194304, 512, 20971520, 1, 0);
    }
    print_log("real", c10_double_log, c10_double_calls);
    print_log("real_i64_", c10_double_i64_log, c10_double_i64_calls);
    printf("calls=%ld calls_i64=%ld\ndone\n", c10_double_calls, c10_double_i64_calls);
    return 0;
}
