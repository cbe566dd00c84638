/* cublas_te.c: the libcublas.so.13 calls Transformer Engine needs beyond PyTorch's
 * inventory (issue 16). PyPI's transformer-engine-cu13 2.12.0
 * (tools/mcore_job/te-requirements.txt) imports them from libcublas.so.13; the real
 * library of CUDA 13.0 (nvidia-cublas 13.1.0.3, the release PyTorch 2.11's
 * CUDA 13.0 wheel pins) exports them, so the fake GPU's double must too for
 * TE's core library to load. Nothing here computes.
 */
#include <stdlib.h>

#define EXPORT __attribute__((visibility("default")))

#include <cublas_api.h>

/* cublasGetStatusString(status): a static, human-readable description of a
 * cuBLAS status, as the real library returns (never NULL; an unknown value
 * gets "unknown error", like cuBLAS). Wording: the status descriptions of
 * the cuBLAS documentation (cublasStatus_t). */
EXPORT const char *
cublasGetStatusString(cublasStatus_t status)
{
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "the functionality requested requires some license";
    default: return "unknown error";
    }
}
