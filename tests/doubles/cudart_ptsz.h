/* cudart_ptsz.h: prototypes of the per-thread-default-stream (_ptsz)
 * variants, which cuda_runtime_api.h only declares through macros under
 * CUDA_API_PER_THREAD_DEFAULT_STREAM. Same signatures as the plain ones. */
#ifndef MOCK_CUDART_PTSZ_H
#define MOCK_CUDART_PTSZ_H
#include <cuda_runtime_api.h>

extern cudaError_t CUDARTAPI cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream);
extern cudaError_t CUDARTAPI cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream);
extern cudaError_t CUDARTAPI cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool,
                                                          cudaStream_t stream);
#endif
