/* cudart_cluster.c: mock libcudart thread-block-cluster occupancy, the two
 * calls Transformer Engine's core library imports beyond PyTorch's inventory
 * (issue 16; transformer-engine-cu13 2.12.0). Kernels are never run; the
 * answers follow the fake device (mock_props.c: compute capability 9.0, 132
 * SMs) and the per-SM block limit of cudart_func.c's occupancy.
 *   Source: cuda_runtime_api.h of the CUDA 13 toolkit (the calls' contracts),
 *   CUDA C++ Programming Guide, "Thread Block Clusters": a portable cluster
 *   has at most 8 blocks; larger sizes need the kernel's opt-in, which a
 *   kernel the fake GPU never runs cannot have given.
 */
#include <cuda_runtime_api.h>

#include "mock_state.h"

#define PORTABLE_CLUSTER_BLOCKS 8
#define DEVICE_SMS 132

/* cudaOccupancyMaxPotentialClusterSize(&size, func, config): the largest
 * cluster the kernel could be launched with: the portable maximum, 8 blocks
 * (the config's cluster dimensions are ignored, as CUDA documents).
 * Errors: NULL size or config cudaErrorInvalidValue, NULL func
 * cudaErrorInvalidDeviceFunction. */
cudaError_t
cudaOccupancyMaxPotentialClusterSize(int *clusterSize, const void *func, const cudaLaunchConfig_t *config)
{
    if (!clusterSize || !config)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    if (!func)
        return (cudaError_t)mock_set_error(cudaErrorInvalidDeviceFunction);
    *clusterSize = PORTABLE_CLUSTER_BLOCKS;
    return cudaSuccess;
}

/* The cluster size (blocks) set by config's cudaLaunchAttributeClusterDimension,
 * 0 when the config sets none. */
static unsigned
config_cluster_blocks(const cudaLaunchConfig_t *config)
{
    for (unsigned i = 0; config->attrs && i < config->numAttrs; i++)
        if (config->attrs[i].id == cudaLaunchAttributeClusterDimension) {
            const cudaLaunchAttributeValue *v = &config->attrs[i].val;
            return v->clusterDim.x * v->clusterDim.y * v->clusterDim.z;
        }
    return 0;
}

/* cudaOccupancyMaxActiveClusters(&n, func, config): how many clusters of the
 * config's size could be resident at once: the blocks per SM that
 * cudaOccupancyMaxActiveBlocksPerMultiprocessor allows for the config's
 * block size and dynamic shared memory, times 132 SMs, divided by the
 * cluster size (an upper bound: the hardware's GPC granularity is not
 * modelled). Errors: NULL n or config, a block of 0 or more than 1024
 * threads cudaErrorInvalidValue; NULL func cudaErrorInvalidDeviceFunction;
 * no cluster size in config (the kernel has no required one) or one above
 * 8 blocks cudaErrorInvalidClusterSize. */
cudaError_t
cudaOccupancyMaxActiveClusters(int *numClusters, const void *func, const cudaLaunchConfig_t *config)
{
    if (!numClusters || !config)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    if (!func)
        return (cudaError_t)mock_set_error(cudaErrorInvalidDeviceFunction);
    unsigned cluster = config_cluster_blocks(config);
    if (cluster == 0 || cluster > PORTABLE_CLUSTER_BLOCKS)
        return (cudaError_t)mock_set_error(cudaErrorInvalidClusterSize);
    unsigned long long threads =
        (unsigned long long)config->blockDim.x * config->blockDim.y * config->blockDim.z;
    if (threads == 0 || threads > 1024)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    int per_sm = 0;
    cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, func, (int)threads,
                                                                    config->dynamicSmemBytes);
    if (err != cudaSuccess)
        return err;
    *numClusters = (int)((unsigned)per_sm * DEVICE_SMS / cluster);
    return cudaSuccess;
}
