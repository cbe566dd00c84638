/* p_values: a small CUDA program on the test doubles for the bad-values
 * tests (test_values.py, hnew findings 5, 6, 14, 15).
 *   names: NVTX ranges named with non-UTF-8 bytes, control characters, a
 *          valid multi-byte name and a 4 KiB name, each around allocations;
 *   many N: N rounds of 64 x 64 KiB cudaMalloc/cudaFree (~N x 128 events). */
#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int
work(int rounds, size_t bytes)
{
    void *p[64];
    for (int i = 0; i < rounds; i++) {
        for (int k = 0; k < 64; k++)
            if (cudaMalloc(&p[k], bytes) != cudaSuccess)
                return 1;
        for (int k = 0; k < 64; k++)
            cudaFree(p[k]);
    }
    return 0;
}

int
main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "names";
    void *x;
    if (cudaSetDevice(0) != cudaSuccess || cudaMalloc(&x, 1 << 20) != cudaSuccess)
        return 3;
    if (strcmp(mode, "many") == 0)
        return work(argc > 2 ? atoi(argv[2]) : 10, 65536) ? 3 : 0;
    if (strcmp(mode, "hold") == 0) { /* a rank that lives MS milliseconds */
        usleep((useconds_t)(argc > 2 ? atoi(argv[2]) : 500) * 1000u);
        return work(1, 4096) || cudaFree(x) != cudaSuccess ? 3 : 0;
    }
    static char big[4097];
    memset(big, 'A', 4096);
    const char *names[] = {
        "\xff\xfe\xc3\x28 bad utf8 \x80",  /* invalid bytes, a broken 2-byte form */
        "tab\tnewline\nbell\a quote\" backslash\\ esc\x1b", /* control characters */
        "\xed\xa0\x80 surrogate, \xc0\xaf overlong, \xf4\x90\x80\x80 too high",
        "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80", /* valid UTF-8 */
        big,                                /* 4 KiB */
    };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        nvtxRangePushA(names[i]);
        if (work(1, 4096))
            return 3;
        nvtxRangePop();
    }
    cudaFree(x);
    return 0;
}
