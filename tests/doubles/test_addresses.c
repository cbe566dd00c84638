/* test_addresses: the fake GPU's device addresses never meet host memory.
 *
 * Nothing backs the doubles' device addresses, and their copies tell device
 * from host memory by whether the page is mapped (cudart_copy.c). An address
 * range where the kernel places the process's own mappings therefore turns a
 * copy "into device memory" into a write over host memory. That was the
 * 1-in-a-few-dozen SIGSEGV of rank 1 of the real Megatron-Core job
 * (docs/validation/megatron-core.md): device 1 handed out 0x7f0000000000 and
 * up, inside the TiB in which x86-64 randomises the mmap base
 * (vm.mmap_rnd_bits 28), so now and then the job's own libraries and heaps
 * lay on top of its "device" blocks.
 *
 * Linked against the fake GPU's libcudart.so.13 and libcuda.so.1 (the copies
 * of cudart_copy.c, the driver's ranges). Run with MOCK_CUDA_DEVICES=64, so
 * every device the doubles can have is checked. Checks, TAP on stdout:
 *   1. the input that showed it: a host page mapped at 0x7f0000000000 (where
 *      the job's libraries landed), then on every device a cudaMalloc, a
 *      cudaMemcpy of 1 MiB into it and a cudaMemset of it: the host page
 *      keeps its bytes, and a copy out of the block reads zeros;
 *   2. every device's first runtime block, driver block (cuMemAlloc) and
 *      reservation (cuMemAddressReserve): on devices >= 1 the address cannot
 *      be mapped by the process at all (mmap MAP_FIXED_NOREPLACE refuses it);
 *      device 0's next 512 GiB lie outside the TiB of mmap bases under
 *      0x7fffffffffff and the TiB of PIE executables above 0x555555554000
 *      (x86-64's default 2^28 pages of randomisation; the machine's own
 *      value is printed).
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#define MIB (1ull << 20)
#define TIB (1ull << 40)
#define OLD_DEV1 0x7f0000000000ull   /* device 1's first address before the fix */
#define USER_TOP 0x800000000000ull   /* x86-64, 4-level page tables */
#define PIE_BASE 0x555555554000ull   /* ELF_ET_DYN_BASE, x86-64 */

static int g_n, g_failed;

static void
ok(int cond, const char *fmt, unsigned long long a, unsigned long long b)
{
    char what[256];
    snprintf(what, sizeof what, fmt, a, b);
    printf("%s %d - %s\n", cond ? "ok" : "not ok", ++g_n, what);
    g_failed += !cond;
}

/* 1 when the process can map a page at `a` (the kernel could put host memory
 * there); the page is unmapped again. */
static int
mappable(uint64_t a)
{
    void *p = mmap((void *)(uintptr_t)a, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS |
                   MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED)
        return 0;
    munmap(p, 4096);
    return 1;
}

/* [a, a + 512 GiB) -- the addresses a device hands out in a run that
 * allocates less than 512 GiB in all (they are never reused) -- misses both
 * windows the kernel picks addresses from by itself: mmap bases over the TiB
 * under the top of user space, with 64 GiB below the lowest base for the
 * process's own mappings, and PIE executables over the TiB above
 * ELF_ET_DYN_BASE, with 64 GiB above for their heap. */
static int
outside_kernel_windows(uint64_t a)
{
    uint64_t end = a + TIB / 2, margin = 64ull << 30;
    int in_mmap = end > USER_TOP - TIB - margin && a < USER_TOP;
    int in_pie = end > PIE_BASE && a < PIE_BASE + TIB + margin;
    return !in_mmap && !in_pie;
}

/* Check 1: host memory at the old device-1 address survives copies into
 * every device's blocks. */
static void
check_host_page_survives(int ndev)
{
    unsigned char *page = mmap((void *)(uintptr_t)OLD_DEV1, 4096, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (page == MAP_FAILED) {
        printf("ok %d # SKIP 0x%llx is taken in this process\n", ++g_n, OLD_DEV1);
        return;
    }
    memset(page, 0xab, 4096);
    static unsigned char src[MIB], back[4096];
    memset(src, 0x5a, sizeof src);
    for (int d = 0; d < ndev; d++) {
        void *p = NULL;
        cudaSetDevice(d);
        int rc = cudaMalloc(&p, MIB) | cudaMemcpy(p, src, MIB, cudaMemcpyHostToDevice) |
                 cudaMemset(p, 0x11, MIB);
        memset(back, 0xff, sizeof back);
        rc |= cudaMemcpy(back, p, sizeof back, cudaMemcpyDeviceToHost);
        int zeros = 1, intact = 1;
        for (size_t i = 0; i < sizeof back; i++)
            zeros &= back[i] == 0;
        for (size_t i = 0; i < 4096; i++)
            intact &= page[i] == 0xab;
        ok(rc == 0 && zeros && intact, "device %llu block %#llx: copies into it leave the host "
           "page at 0x7f0000000000 intact and it reads back zeros", (unsigned long long)d,
           (unsigned long long)(uintptr_t)p);
        cudaFree(p);
    }
    munmap(page, 4096);
}

/* Check 2 for one address of device d. */
static void
check_address(const char *kind, int d, uint64_t a)
{
    char fmt[160];
    if (d == 0) {
        snprintf(fmt, sizeof fmt, "device %%llu %s %%#llx: outside the kernel's mmap and PIE "
                 "windows", kind);
        ok(a && outside_kernel_windows(a), fmt, (unsigned long long)d, a);
    } else {
        snprintf(fmt, sizeof fmt, "device %%llu %s %%#llx: the process cannot map it", kind);
        ok(a && !mappable(a), fmt, (unsigned long long)d, a);
    }
}

static void
check_ranges(int ndev)
{
    cuInit(0);
    for (int d = 0; d < ndev; d++) {
        void *p = NULL;
        CUcontext ctx = NULL;
        CUdeviceptr blk = 0, va = 0;
        cudaSetDevice(d);
        cudaMalloc(&p, 512);
        check_address("cudaMalloc", d, (uint64_t)(uintptr_t)p);
        cudaFree(p);
        cuDevicePrimaryCtxRetain(&ctx, d);
        cuCtxSetCurrent(ctx);
        cuMemAlloc(&blk, 512);
        check_address("cuMemAlloc", d, blk);
        cuMemFree(blk);
        cuMemAddressReserve(&va, 2 * MIB, 0, 0, 0);
        check_address("cuMemAddressReserve", d, va);
        cuMemAddressFree(va, 2 * MIB);
    }
}

int
main(void)
{
    int ndev = 0;
    cudaGetDeviceCount(&ndev);
    FILE *f = fopen("/proc/sys/vm/mmap_rnd_bits", "r");
    int bits = 0;
    if (f) {
        if (fscanf(f, "%d", &bits) != 1)
            bits = 0;
        fclose(f);
    }
    printf("# %d devices; vm.mmap_rnd_bits %d (the windows assume 28: x86-64's default)\n",
           ndev, bits);
    ok(ndev >= 2, "%llu devices (MOCK_CUDA_DEVICES) of at least %llu", (unsigned long long)ndev, 2);
    check_host_page_survives(ndev);
    check_ranges(ndev);
    printf("1..%d\n", g_n);
    return g_failed ? 1 : 0;
}
