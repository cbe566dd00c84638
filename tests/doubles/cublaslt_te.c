/* cublaslt_te.c: the libcublasLt.so.13 calls Transformer Engine needs beyond PyTorch's
 * inventory (issue 16). PyPI's transformer-engine-cu13 2.12.0
 * (tools/mcore_job/te-requirements.txt) imports them from libcublasLt.so.13; the real
 * library of CUDA 13.0 (nvidia-cublas 13.1.0.3, the release PyTorch 2.11's
 * CUDA 13.0 wheel pins) exports them, so the fake GPU's double must too for
 * TE's core library to load. Nothing here computes.
 */
#include <stdlib.h>

#define EXPORT __attribute__((visibility("default")))

#include <cublasLt.h>

/* cublasLtCreate(&handle): a cuBLASLt handle (a small opaque heap object;
 * TE creates one per device and thread and never destroys it).
 * Errors: NULL out-pointer CUBLAS_STATUS_INVALID_VALUE, out of host memory
 * CUBLAS_STATUS_ALLOC_FAILED. */
EXPORT cublasStatus_t
cublasLtCreate(cublasLtHandle_t *lightHandle)
{
    if (!lightHandle)
        return CUBLAS_STATUS_INVALID_VALUE;
    *lightHandle = calloc(1, 64);
    return *lightHandle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

/* cublasLtDestroy(handle): frees a handle of cublasLtCreate.
 * Errors: NULL handle CUBLAS_STATUS_NOT_INITIALIZED (as cuBLASLt). */
EXPORT cublasStatus_t
cublasLtDestroy(cublasLtHandle_t lightHandle)
{
    if (!lightHandle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    free(lightHandle);
    return CUBLAS_STATUS_SUCCESS;
}
