/* cublas_mock.c: mock cuBLAS and cuBLASLt (libcublas.so.13, libcublasLt.so.13
 * of the fake GPU; tests/doubles/fake_gpu).
 *
 * Handles and descriptors are small heap objects that remember what PyTorch
 * sets on them (stream, workspace, math and pointer modes); attributes set on
 * cuBLASLt descriptors are accepted and not kept. cublasLtMatmulAlgoGetHeuristic
 * returns one algorithm that needs no workspace. Every compute routine
 * (GEMMs, cublasLtMatmul, ...) is accepted and not executed: gen_stubs.py
 * generates those as returning CUBLAS_STATUS_SUCCESS (--accept), since their
 * outputs are device memory, which the fake GPU does not back.
 *   NULL out-pointer or handle: CUBLAS_STATUS_INVALID_VALUE / NOT_INITIALIZED.
 * Prototypes: the CUDA 13 toolkit's cublas_api.h; cuBLASLt is in
 * cublaslt_mock.c.
 */
#include <cublas_api.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
#define HANDLE_MAGIC 0x43424c48U   /* "CBLH" */

struct cublasContext {
    unsigned magic;
    cudaStream_t stream;
    void *workspace;
    size_t workspace_bytes;
    cublasMath_t math;
    cublasPointerMode_t pointer_mode;
};

static int
handle_ok(cublasHandle_t h)
{
    return h && h->magic == HANDLE_MAGIC;
}

EXPORT cublasStatus_t
cublasCreate_v2(cublasHandle_t *handle)
{
    if (!handle)
        return CUBLAS_STATUS_INVALID_VALUE;
    struct cublasContext *h = calloc(1, sizeof *h);
    if (!h)
        return CUBLAS_STATUS_ALLOC_FAILED;
    h->magic = HANDLE_MAGIC;
    h->math = CUBLAS_DEFAULT_MATH;
    h->pointer_mode = CUBLAS_POINTER_MODE_HOST;
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t
cublasDestroy_v2(cublasHandle_t handle)
{
    if (!handle_ok(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->magic = 0;
    free(handle);
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t
cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId)
{
    if (!handle_ok(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = streamId;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t
cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, size_t workspaceSizeInBytes)
{
    if (!handle_ok(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->workspace = workspace;
    handle->workspace_bytes = workspaceSizeInBytes;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t
cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
    if (!handle_ok(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t
cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode)
{
    if (!handle_ok(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode)
        return CUBLAS_STATUS_INVALID_VALUE;
    *mode = handle->math;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t
cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode)
{
    if (!handle_ok(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->pointer_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t
cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t *mode)
{
    if (!handle_ok(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode)
        return CUBLAS_STATUS_INVALID_VALUE;
    *mode = handle->pointer_mode;
    return CUBLAS_STATUS_SUCCESS;
}
