// c10_i64.cpp: double "libc10" with the older signature, int64_t totals.
#include "c10_device.h"
#include "c10_double.h"

extern "C" {
__attribute__((visibility("default"))) long c10_double_i64_calls;
__attribute__((visibility("default"))) c10_double_call c10_double_i64_log[C10_DOUBLE_LOG];
}

namespace c10 {
__attribute__((visibility("default"))) void
reportMemoryUsageToProfiler(void *ptr, int64_t alloc_size, int64_t total_allocated, int64_t total_reserved,
                            Device device)
{
    long n = __atomic_fetch_add(&c10_double_i64_calls, 1, __ATOMIC_RELAXED);
    if (n < C10_DOUBLE_LOG)
        c10_double_i64_log[n] = c10_double_call{ ptr, alloc_size, (uint64_t)total_allocated,
                                                 (uint64_t)total_reserved, device.type, device.index };
}
}
