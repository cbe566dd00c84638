// c10.cpp: double "libc10": c10::reportMemoryUsageToProfiler with size_t
// totals (current PyTorch), counting and logging every call.
#include <cstddef>

#include "c10_device.h"
#include "c10_double.h"

extern "C" {
__attribute__((visibility("default"))) long c10_double_calls;
__attribute__((visibility("default"))) c10_double_call c10_double_log[C10_DOUBLE_LOG];
}

namespace c10 {
__attribute__((visibility("default"))) void
reportMemoryUsageToProfiler(void *ptr, int64_t alloc_size, size_t total_allocated, size_t total_reserved,
                            Device device)
{
    long n = __atomic_fetch_add(&c10_double_calls, 1, __ATOMIC_RELAXED);
    if (n < C10_DOUBLE_LOG)
        c10_double_log[n] = c10_double_call{ ptr, alloc_size, total_allocated, total_reserved, device.type,
                                             device.index };
}
}
