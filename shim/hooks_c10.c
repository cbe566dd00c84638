/* hooks_c10.c: PyTorch's own allocator report, the tensor level.
 *
 * The caching allocator (libc10_cuda) calls
 *   c10::reportMemoryUsageToProfiler(ptr, ±block size, total allocated,
 *                                    total reserved, c10::Device)
 * in libc10 on every block allocation and free, through the PLT
 * ([PT] in docs/sources.md). The shim defines the function under its mangled
 * names, records a TENSOR record for CUDA devices, and forwards to the real
 * one. A changed signature changes the mangled name: the hook is then never
 * called, never called wrongly. The 3-argument form passed the allocator's
 * block rather than the device pointer and is deliberately not hooked.
 * Runs under the allocator's lock: record and return.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>

#include "record.h"
#include "writer.h"

/* c10::Device: two int8_t (type, index), trivially copyable, passed in a
 * register like this struct (c10/core/Device.h). */
typedef struct rs_c10_device {
    int8_t type;
    int8_t index;
} rs_c10_device;

#define RS_C10_CUDA 1 /* c10::DeviceType::CUDA */

#define NAME_SIZE_T "_ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE"
#define NAME_INT64 "_ZN3c1027reportMemoryUsageToProfilerEPvlllNS_6DeviceE"

typedef void (*fn_report_u)(void *, int64_t, size_t, size_t, rs_c10_device);
typedef void (*fn_report_i)(void *, int64_t, int64_t, int64_t, rs_c10_device);

static _Atomic(void *) g_real_u, g_real_i;

static void *
real_of(_Atomic(void *) *slot, const char *name)
{
    void *p = atomic_load_explicit(slot, memory_order_acquire);
    if (!p) {
        t_rs.guard++;
        p = dlsym(RTLD_NEXT, name);
        t_rs.guard--;
        atomic_store_explicit(slot, p, memory_order_release);
    }
    return p;
}

static void
record(void *ptr, int64_t size, uint64_t alloc, uint64_t reserved, rs_c10_device dev,
       uint64_t caller, uint32_t signature)
{
    /* CPU allocators report too: ignore them, and never create a file. */
    if (dev.type != RS_C10_CUDA || t_rs.guard || !rs_enabled())
        return;
    t_rs.guard++;
    if (dev.index >= 0 && t_rs.device < 0)
        t_rs.device = dev.index;
    if (rs_trace_open())
        rs_record_tensor((uint64_t)(uintptr_t)ptr, size, alloc, reserved, caller, dev.type,
                         dev.index, signature);
    t_rs.guard--;
}

RS_EXPORT void _ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE(void *ptr, int64_t size,
                                                                      size_t alloc,
                                                                      size_t reserved,
                                                                      rs_c10_device dev);
void
_ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE(void *ptr, int64_t size, size_t alloc,
                                                      size_t reserved, rs_c10_device dev)
{
    record(ptr, size, alloc, reserved, dev, (uint64_t)(uintptr_t)__builtin_return_address(0), 1);
    fn_report_u real = (fn_report_u)real_of(&g_real_u, NAME_SIZE_T);
    if (real)
        real(ptr, size, alloc, reserved, dev);
}

RS_EXPORT void _ZN3c1027reportMemoryUsageToProfilerEPvlllNS_6DeviceE(void *ptr, int64_t size,
                                                                      int64_t alloc,
                                                                      int64_t reserved,
                                                                      rs_c10_device dev);
void
_ZN3c1027reportMemoryUsageToProfilerEPvlllNS_6DeviceE(void *ptr, int64_t size, int64_t alloc,
                                                      int64_t reserved, rs_c10_device dev)
{
    record(ptr, size, (uint64_t)alloc, (uint64_t)reserved, dev,
           (uint64_t)(uintptr_t)__builtin_return_address(0), 2);
    fn_report_i real = (fn_report_i)real_of(&g_real_i, NAME_INT64);
    if (real)
        real(ptr, size, alloc, reserved, dev);
}
