/* test_te_calls: the calls the fake GPU gained for Transformer Engine
 * (issue 16; cublas_te.c, cublaslt_te.c, cudart_cluster.c) answer as the real
 * libraries do for valid and invalid calls, and compute nothing.
 *
 * Linked against the fake GPU's libcudart.so.13, libcublas.so.13 and
 * libcublasLt.so.13. Checks, TAP on stdout:
 *   1. cublasGetStatusString: a description for every status, "unknown
 *      error" for a value that is none;
 *   2. cublasLtCreate/cublasLtDestroy: a handle, NULL out-pointer
 *      CUBLAS_STATUS_INVALID_VALUE, NULL handle NOT_INITIALIZED;
 *   3. cudaOccupancyMaxPotentialClusterSize: 8 (portable maximum), errors;
 *   4. cudaOccupancyMaxActiveClusters: 132 SMs x blocks per SM / cluster
 *      size for a 256-thread block (8 blocks per SM by the 2048-thread
 *      limit: 132 clusters of 8, 1056 of 1), fewer with 100 KiB of dynamic
 *      shared memory (2 blocks per SM: 33 clusters of 8), and
 *      cudaErrorInvalidClusterSize without a cluster size or above 8;
 *   5. cudnnGetVersion (cudnn_te.c): 91900, which Transformer Engine's
 *      get_cudnn_version decodes (major 10000, minor 100) as 9.19.0, the
 *      cuDNN PyTorch 2.11.0's CUDA 13.0 wheel pins.
 */
#include <cublasLt.h>
#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

size_t cudnnGetVersion(void);  /* cudnn.h's declaration; the header is not needed */

static int g_n, g_fail;

static void
ok(int cond, const char *what)
{
    printf("%sok %d - %s\n", cond ? "" : "not ", ++g_n, what);
    g_fail |= !cond;
}

static void
kernel_stand_in(void)
{
}

static int
clusters(unsigned cluster, unsigned threads, size_t smem, int *out)
{
    cudaLaunchAttribute attr;
    memset(&attr, 0, sizeof attr);
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = cluster;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = (dim3){cluster * 64, 1, 1};
    cfg.blockDim = (dim3){threads, 1, 1};
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = cluster ? &attr : NULL;
    cfg.numAttrs = cluster ? 1 : 0;
    *out = -1;
    return cudaOccupancyMaxActiveClusters(out, (const void *)kernel_stand_in, &cfg);
}

int
main(void)
{
    ok(strcmp(cublasGetStatusString(CUBLAS_STATUS_SUCCESS), "the operation completed successfully") == 0,
       "cublasGetStatusString(SUCCESS)");
    ok(strcmp(cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED),
              "the functionality requested is not supported") == 0,
       "cublasGetStatusString(NOT_SUPPORTED)");
    ok(strcmp(cublasGetStatusString((cublasStatus_t)12345), "unknown error") == 0,
       "cublasGetStatusString(12345) is \"unknown error\"");

    cublasLtHandle_t h = NULL;
    ok(cublasLtCreate(&h) == CUBLAS_STATUS_SUCCESS && h != NULL, "cublasLtCreate gives a handle");
    ok(cublasLtDestroy(h) == CUBLAS_STATUS_SUCCESS, "cublasLtDestroy frees it");
    ok(cublasLtCreate(NULL) == CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate(NULL): INVALID_VALUE");
    ok(cublasLtDestroy(NULL) == CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy(NULL): NOT_INITIALIZED");

    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.blockDim = (dim3){256, 1, 1};
    int size = -1;
    ok(cudaOccupancyMaxPotentialClusterSize(&size, (const void *)kernel_stand_in, &cfg) == cudaSuccess &&
       size == 8, "cudaOccupancyMaxPotentialClusterSize: 8");
    ok(cudaOccupancyMaxPotentialClusterSize(NULL, (const void *)kernel_stand_in, &cfg) ==
       cudaErrorInvalidValue, "cudaOccupancyMaxPotentialClusterSize(NULL): cudaErrorInvalidValue");
    ok(cudaOccupancyMaxPotentialClusterSize(&size, NULL, &cfg) == cudaErrorInvalidDeviceFunction,
       "cudaOccupancyMaxPotentialClusterSize(func NULL): cudaErrorInvalidDeviceFunction");
    (void)cudaGetLastError();

    int n;
    ok(clusters(8, 256, 0, &n) == cudaSuccess && n == 132, "8-block clusters of 256 threads: 132");
    ok(clusters(1, 256, 0, &n) == cudaSuccess && n == 1056, "1-block clusters of 256 threads: 1056");
    ok(clusters(8, 256, 100 * 1024, &n) == cudaSuccess && n == 33,
       "8-block clusters with 100 KiB of dynamic shared memory: 33");
    ok(clusters(0, 256, 0, &n) == cudaErrorInvalidClusterSize, "no cluster size: cudaErrorInvalidClusterSize");
    ok(clusters(16, 256, 0, &n) == cudaErrorInvalidClusterSize, "16-block clusters: cudaErrorInvalidClusterSize");
    ok(clusters(8, 0, 0, &n) == cudaErrorInvalidValue, "0-thread block: cudaErrorInvalidValue");
    (void)cudaGetLastError();

    size_t v = cudnnGetVersion();
    ok(v == 91900 && v / 10000 == 9 && v % 10000 / 100 == 19 && v % 100 == 0,
       "cudnnGetVersion: 91900 (cuDNN 9.19.0, the release torch 2.11.0 pins)");
    printf("1..%d\n", g_n);
    return g_fail;
}
