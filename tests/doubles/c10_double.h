/* c10_double.h: the "libc10" doubles' C interface, for test programs.
 *
 * libc10.so defines c10::reportMemoryUsageToProfiler(void*, int64_t,
 * size_t, size_t, c10::Device) (mangled
 * _ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE), libc10_i64.so the
 * older int64_t-totals signature (..._EPvlllNS_6DeviceE). Each counts its
 * calls and keeps the arguments of the last C10_DOUBLE_LOG calls, so tests
 * can prove that every call reached the real function unchanged.
 *
 * libc10_cuda.so / libc10_cuda_i64.so call them through the PLT, as
 * PyTorch's CUDA caching allocator in libc10_cuda calls libc10. */
#ifndef C10_DOUBLE_H
#define C10_DOUBLE_H
#include <stddef.h>
#include <stdint.h>

#define C10_DOUBLE_LOG 64

typedef struct c10_double_call {
    void *ptr;
    int64_t size;
    uint64_t total_allocated;
    uint64_t total_reserved;
    int type;
    int index;
} c10_double_call;

#ifdef __cplusplus
extern "C" {
#endif
/* libc10.so (size_t totals) */
extern long c10_double_calls;
extern c10_double_call c10_double_log[C10_DOUBLE_LOG];
/* libc10_i64.so (int64_t totals) */
extern long c10_double_i64_calls;
extern c10_double_call c10_double_i64_log[C10_DOUBLE_LOG];

/* libc10_cuda.so: calls c10::reportMemoryUsageToProfiler (size_t totals). */
void c10cuda_block(void *ptr, int64_t size, size_t alloc, size_t reserved, int type, int index);
/* libc10_cuda_i64.so: the int64_t-totals signature. */
void c10cuda_i64_block(void *ptr, int64_t size, int64_t alloc, int64_t reserved, int type, int index);
#ifdef __cplusplus
}
#endif
#endif
