/* cudart_props.c: mock libcudart device properties and attributes; the
 * values (an H100 SXM5 with MOCK_CUDA_CAPACITY bytes) are in mock_props.c. */
#include <cuda_runtime_api.h>

#include "mock_state.h"

cudaError_t
cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    if (!prop)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    if (!mock_valid_device(device))
        return (cudaError_t)mock_set_error(cudaErrorInvalidDevice);
    mock_device_props(device, prop);
    return cudaSuccess;
}

cudaError_t
cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    if (!value)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    if (!mock_valid_device(device))
        return (cudaError_t)mock_set_error(cudaErrorInvalidDevice);
    *value = mock_device_attr(attr, device);
    return cudaSuccess;
}
