/* cublaslt_mock.c: mock cuBLASLt (libcublasLt.so.13 of the fake GPU; see
 * cublas_mock.c for what the cuBLAS doubles do and do not do). Prototypes:
 * the CUDA 13 toolkit's cublasLt.h. */
#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

/* Version of the cuBLASLt the wheel was built against: CUDA 13.0's 13.0.0. */
EXPORT size_t
cublasLtGetVersion(void)
{
    return 130000;
}

/* Descriptors: opaque objects; set attributes are accepted, not kept. */
static cublasStatus_t
new_desc(void **out)
{
    if (!out)
        return CUBLAS_STATUS_INVALID_VALUE;
    *out = calloc(1, 64);
    return *out ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

EXPORT cublasStatus_t
cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc, cublasComputeType_t computeType,
                         cudaDataType_t scaleType)
{
    (void)computeType, (void)scaleType;
    return new_desc((void **)matmulDesc);
}

EXPORT cublasStatus_t
cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc)
{
    free(matmulDesc);
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t
cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                               const void *buf, size_t sizeInBytes)
{
    (void)attr, (void)sizeInBytes;
    return matmulDesc && buf ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

EXPORT cublasStatus_t
cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type, uint64_t rows,
                           uint64_t cols, int64_t ld)
{
    (void)type, (void)rows, (void)cols, (void)ld;
    return new_desc((void **)matLayout);
}

EXPORT cublasStatus_t
cublasLtMatrixLayoutDestroy(const cublasLtMatrixLayout_t matLayout)
{
    free(matLayout);
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t
cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                 const void *buf, size_t sizeInBytes)
{
    (void)attr, (void)sizeInBytes;
    return matLayout && buf ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

EXPORT cublasStatus_t
cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref)
{
    return new_desc((void **)pref);
}

EXPORT cublasStatus_t
cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)
{
    free(pref);
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t
cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                     cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                     size_t sizeInBytes)
{
    (void)attr, (void)sizeInBytes;
    return pref && buf ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

/* One algorithm, no workspace, always applicable. */
EXPORT cublasStatus_t
cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                               cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                               cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                               cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                               cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                               int *returnAlgoCount)
{
    (void)lightHandle, (void)Adesc, (void)Bdesc, (void)Cdesc, (void)Ddesc, (void)preference;
    if (!operationDesc || !heuristicResultsArray || !returnAlgoCount || requestedAlgoCount < 1)
        return CUBLAS_STATUS_INVALID_VALUE;
    memset(&heuristicResultsArray[0], 0, sizeof heuristicResultsArray[0]);
    heuristicResultsArray[0].algo.data[0] = 1;
    heuristicResultsArray[0].workspaceSize = 0;
    heuristicResultsArray[0].state = CUBLAS_STATUS_SUCCESS;
    heuristicResultsArray[0].wavesCount = 1.0f;
    *returnAlgoCount = 1;
    return CUBLAS_STATUS_SUCCESS;
}
