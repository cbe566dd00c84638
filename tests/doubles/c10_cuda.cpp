// c10_cuda.cpp: double "libc10_cuda": the CUDA caching allocator's report,
// a call into libc10 through the PLT.
#include <cstddef>

#include "c10_device.h"
#include "c10_double.h"

namespace c10 {
void reportMemoryUsageToProfiler(void *ptr, int64_t alloc_size, size_t total_allocated, size_t total_reserved,
                                 Device device);
}

extern "C" __attribute__((visibility("default"))) void
c10cuda_block(void *ptr, int64_t size, size_t alloc, size_t reserved, int type, int index)
{
    c10::reportMemoryUsageToProfiler(ptr, size, alloc, reserved, c10::Device{ (int8_t)type, (int8_t)index });
}
