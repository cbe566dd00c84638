// c10_cuda_i64.cpp: double "libc10_cuda" for the int64_t-totals signature.
#include "c10_device.h"
#include "c10_double.h"

namespace c10 {
void reportMemoryUsageToProfiler(void *ptr, int64_t alloc_size, int64_t total_allocated, int64_t total_reserved,
                                 Device device);
}

extern "C" __attribute__((visibility("default"))) void
c10cuda_i64_block(void *ptr, int64_t size, int64_t alloc, int64_t reserved, int type, int index)
{
    c10::reportMemoryUsageToProfiler(ptr, size, alloc, reserved, c10::Device{ (int8_t)type, (int8_t)index });
}
