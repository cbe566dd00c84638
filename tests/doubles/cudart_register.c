/* cudart_register.c: mock libcudart module registration and kernel launches.
 *
 * Every CUDA host object registers its fat binaries, kernels and device
 * variables from static constructors (`import torch` makes thousands of these
 * calls), so they are cheap: nothing is stored. A fat binary's handle is a
 * pointer to a static word; a kernel's handle (cudaKernel_t) is its host stub
 * address. Launches are accepted and not executed (device memory is not
 * backed: docs/validation/README.md): the launch configuration pushed by
 * `<<<...>>>` (__cudaPushCallConfiguration) is kept per thread, one deep as
 * the generated host stubs use it, and handed back by
 * __cudaPopCallConfiguration. Prototypes: the CUDA 13 toolkit's
 * crt/host_runtime.h and crt/device_functions.h (C++ only, so restated here).
 */
#include <cuda_runtime_api.h>
#include <stddef.h>

#include "mock_state.h"

static void *g_fatbin_handle;   /* what every __cudaRegisterFatBinary returns */

void **
__cudaRegisterFatBinary(void *fatCubin)
{
    (void)fatCubin;
    return &g_fatbin_handle;
}

void
__cudaRegisterFatBinaryEnd(void **handle)
{
    (void)handle;
}

void
__cudaUnregisterFatBinary(void **handle)
{
    (void)handle;
}

void
__cudaRegisterFunction(void **handle, const char *hostFun, char *deviceFun, const char *deviceName,
                       int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize)
{
    (void)handle, (void)hostFun, (void)deviceFun, (void)deviceName, (void)thread_limit;
    (void)tid, (void)bid, (void)bDim, (void)gDim, (void)wSize;
}

void
__cudaRegisterVar(void **handle, char *hostVar, char *deviceAddress, const char *deviceName, int ext,
                  size_t size, int constant, int global)
{
    (void)handle, (void)hostVar, (void)deviceAddress, (void)deviceName, (void)ext;
    (void)size, (void)constant, (void)global;
}

void
__cudaRegisterManagedVar(void **handle, void **hostVarPtrAddress, char *deviceAddress,
                         const char *deviceName, int ext, size_t size, int constant, int global)
{
    (void)handle, (void)hostVarPtrAddress, (void)deviceAddress, (void)deviceName, (void)ext;
    (void)size, (void)constant, (void)global;
}

char
__cudaInitModule(void **handle)
{
    (void)handle;
    return 1;
}

/* The configuration of the next launch on this thread (<<<grid, block, shmem, stream>>>). */
static __thread struct {
    dim3 grid, block;
    size_t shmem;
    void *stream;
} t_config;

unsigned
__cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, void *stream)
{
    t_config.grid = gridDim;
    t_config.block = blockDim;
    t_config.shmem = sharedMem;
    t_config.stream = stream;
    return 0;
}

cudaError_t
__cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem, void *stream)
{
    *gridDim = t_config.grid;
    *blockDim = t_config.block;
    *sharedMem = t_config.shmem;
    *(void **)stream = t_config.stream;
    return cudaSuccess;
}

cudaError_t
__cudaGetKernel(cudaKernel_t *kernel, const void *hostFun)
{
    if (!kernel || !hostFun)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    *kernel = (cudaKernel_t)hostFun;
    return cudaSuccess;
}

/* Launches: accepted, not executed. */
cudaError_t
__cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
                   cudaStream_t stream)
{
    (void)gridDim, (void)blockDim, (void)args, (void)sharedMem, (void)stream;
    return kernel ? cudaSuccess : (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
}

cudaError_t
cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
                 cudaStream_t stream)
{
    (void)gridDim, (void)blockDim, (void)args, (void)sharedMem, (void)stream;
    return func ? cudaSuccess : (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
}

cudaError_t
cudaLaunchCooperativeKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                            size_t sharedMem, cudaStream_t stream)
{
    return cudaLaunchKernel(func, gridDim, blockDim, args, sharedMem, stream);
}

cudaError_t
cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args)
{
    (void)args;
    return config && func ? cudaSuccess : (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
}
