/* cudart_func.c: mock libcudart kernel attributes and occupancy.
 *
 * Kernels are never run, so their attributes are plausible constants for a
 * compute capability 9.0 kernel (mock_props.c): 1024 threads per block, 32
 * registers per thread, no static shared memory, the default 48 KiB of
 * dynamic shared memory (a kernel may raise it with cudaFuncSetAttribute up
 * to the opt-in limit, 227 KiB), binary and PTX version 90. Occupancy follows
 * the per-SM limits of compute capability 9.0 (CUDA C++ Programming Guide,
 * technical specifications): at most 32 blocks and 2048 threads per SM and
 * 228 KiB of shared memory per SM, 1 KiB of it reserved per block.
 *   NULL out-pointer or function: cudaErrorInvalidValue (cudaErrorInvalidDeviceFunction
 *   for a NULL function, as CUDA).
 */
#include <cuda_runtime_api.h>
#include <string.h>

#include "mock_state.h"

#define SM_THREADS 2048
#define SM_BLOCKS 32
#define SM_SHARED (228 * 1024)
#define BLOCK_RESERVED_SHARED 1024
#define BLOCK_SHARED_OPTIN (227 * 1024)

cudaError_t
cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func)
{
    if (!attr)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    if (!func)
        return (cudaError_t)mock_set_error(cudaErrorInvalidDeviceFunction);
    memset(attr, 0, sizeof *attr);
    attr->maxThreadsPerBlock = 1024;
    attr->numRegs = 32;
    attr->maxDynamicSharedSizeBytes = 48 * 1024;
    attr->binaryVersion = 90;
    attr->ptxVersion = 90;
    return cudaSuccess;
}

cudaError_t
cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    if (!func)
        return (cudaError_t)mock_set_error(cudaErrorInvalidDeviceFunction);
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize && (value < 0 || value > BLOCK_SHARED_OPTIN))
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    return cudaSuccess;
}

cudaError_t
cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, const void *func, int blockSize,
                                                       size_t dynamicSMemSize, unsigned int flags)
{
    (void)flags;
    if (!numBlocks || blockSize <= 0 || blockSize > 1024)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    if (!func)
        return (cudaError_t)mock_set_error(cudaErrorInvalidDeviceFunction);
    int n = SM_THREADS / blockSize;
    if (n > SM_BLOCKS)
        n = SM_BLOCKS;
    size_t per_block = dynamicSMemSize + BLOCK_RESERVED_SHARED;
    if ((size_t)n * per_block > SM_SHARED)
        n = (int)(SM_SHARED / per_block);
    *numBlocks = n;
    return cudaSuccess;
}

cudaError_t
cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, const void *func, int blockSize,
                                              size_t dynamicSMemSize)
{
    return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize,
                                                                  dynamicSMemSize, 0);
}
