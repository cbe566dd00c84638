/* mock_props.c: the fake devices' properties, shared by the mock runtime
 * (cudaGetDeviceProperties, cudaDeviceGetAttribute) and the mock driver
 * (cuDeviceGetAttribute; CUdevice_attribute values equal cudaDeviceAttr ones).
 *
 * Every device is an NVIDIA H100 SXM5 80GB ("NVIDIA H100 80GB HBM3"), except
 * its memory: totalGlobalMem is MOCK_CUDA_CAPACITY. Sources of the values:
 * NVIDIA H100 Tensor Core GPU Architecture whitepaper (132 SMs, 5120-bit
 * HBM3, 50 MiB L2) and the CUDA C++ Programming Guide's table of technical
 * specifications for compute capability 9.0 (2048 threads and 32 blocks per
 * SM, 64 K registers per SM and per block, 228 KiB shared memory per SM, 227
 * KiB opt-in per block, 48 KiB default per block, 1 KiB reserved per block).
 * The PCI bus id of device d is d + 0x18 on domain 0 (any distinct value).
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

#include "mock_state.h"

MOCK_HIDDEN void
mock_device_props(int dev, void *props)
{
    struct cudaDeviceProp *p = props;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "NVIDIA H100 80GB HBM3");
    for (int i = 0; i < 16; i++)
        p->uuid.bytes[i] = (char)(0x5a ^ (i * 17) ^ dev);
    p->totalGlobalMem = (size_t)mock_capacity();
    p->sharedMemPerBlock = 48 * 1024;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->memPitch = 2147483647;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024, p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647, p->maxGridSize[1] = 65535, p->maxGridSize[2] = 65535;
    p->totalConstMem = 65536;
    p->major = 9;
    p->minor = 0;
    p->textureAlignment = 512;
    p->texturePitchAlignment = 32;
    p->multiProcessorCount = 132;
    p->canMapHostMemory = 1;
    p->surfaceAlignment = 512;
    p->concurrentKernels = 1;
    p->ECCEnabled = 1;
    p->pciBusID = 0x18 + dev;
    p->asyncEngineCount = 3;
    p->unifiedAddressing = 1;
    p->memoryBusWidth = 5120;
    p->l2CacheSize = 50 * 1024 * 1024;
    p->persistingL2CacheMaxSize = 32505856;
    p->maxThreadsPerMultiProcessor = 2048;
    p->streamPrioritiesSupported = 1;
    p->globalL1CacheSupported = 1;
    p->localL1CacheSupported = 1;
    p->sharedMemPerMultiprocessor = 228 * 1024;
    p->regsPerMultiprocessor = 65536;
    p->managedMemory = 1;
    p->concurrentManagedAccess = 1;
    p->computePreemptionSupported = 1;
    p->cooperativeLaunch = 1;
    p->sharedMemPerBlockOptin = 227 * 1024;
    p->maxBlocksPerMultiProcessor = 32;
    p->accessPolicyMaxWindowSize = 134213632;
    p->reservedSharedMemPerBlock = 1024;
    p->hostRegisterSupported = 1;
    p->memoryPoolsSupported = 1;
    p->ipcEventSupported = 1;
    p->clusterLaunch = 1;
    p->unifiedFunctionPointers = 1;
    p->memoryPoolSupportedHandleTypes = 1;   /* cudaMemHandleTypePosixFileDescriptor */
}

/* The value of device attribute ATTR (a cudaDeviceAttr / CUdevice_attribute);
 * attributes the table does not know are 0. */
MOCK_HIDDEN int
mock_device_attr(int attr, int device)
{
    struct cudaDeviceProp p;
    int v;
    mock_device_props(device, &p);
    switch ((enum cudaDeviceAttr)attr) {
    case cudaDevAttrMaxThreadsPerBlock: v = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: v = p.maxThreadsDim[0]; break;
    case cudaDevAttrMaxBlockDimY: v = p.maxThreadsDim[1]; break;
    case cudaDevAttrMaxBlockDimZ: v = p.maxThreadsDim[2]; break;
    case cudaDevAttrMaxGridDimX: v = p.maxGridSize[0]; break;
    case cudaDevAttrMaxGridDimY: v = p.maxGridSize[1]; break;
    case cudaDevAttrMaxGridDimZ: v = p.maxGridSize[2]; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: v = (int)p.sharedMemPerBlock; break;
    case cudaDevAttrTotalConstantMemory: v = (int)p.totalConstMem; break;
    case cudaDevAttrWarpSize: v = p.warpSize; break;
    case cudaDevAttrMaxRegistersPerBlock: v = p.regsPerBlock; break;
    case cudaDevAttrMultiProcessorCount: v = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: v = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: v = p.minor; break;
    case cudaDevAttrL2CacheSize: v = p.l2CacheSize; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: v = p.maxThreadsPerMultiProcessor; break;
    case cudaDevAttrGlobalMemoryBusWidth: v = p.memoryBusWidth; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: v = (int)p.sharedMemPerMultiprocessor; break;
    case cudaDevAttrMaxRegistersPerMultiprocessor: v = p.regsPerMultiprocessor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: v = (int)p.sharedMemPerBlockOptin; break;
    case cudaDevAttrMaxBlocksPerMultiprocessor: v = p.maxBlocksPerMultiProcessor; break;
    case cudaDevAttrReservedSharedMemoryPerBlock: v = (int)p.reservedSharedMemPerBlock; break;
    case cudaDevAttrPciBusId: v = p.pciBusID; break;
    case cudaDevAttrPciDeviceId: v = p.pciDeviceID; break;
    case cudaDevAttrPciDomainId: v = p.pciDomainID; break;
    case cudaDevAttrAsyncEngineCount: v = p.asyncEngineCount; break;
    case cudaDevAttrConcurrentKernels: v = p.concurrentKernels; break;
    case cudaDevAttrEccEnabled: v = p.ECCEnabled; break;
    case cudaDevAttrUnifiedAddressing: v = p.unifiedAddressing; break;
    case cudaDevAttrManagedMemory: v = p.managedMemory; break;
    case cudaDevAttrConcurrentManagedAccess: v = p.concurrentManagedAccess; break;
    case cudaDevAttrCooperativeLaunch: v = p.cooperativeLaunch; break;
    case cudaDevAttrMemoryPoolsSupported: v = p.memoryPoolsSupported; break;
    case cudaDevAttrStreamPrioritiesSupported: v = p.streamPrioritiesSupported; break;
    case cudaDevAttrCanMapHostMemory: v = p.canMapHostMemory; break;
    case cudaDevAttrIpcEventSupport: v = p.ipcEventSupported; break;
    case cudaDevAttrClusterLaunch: v = p.clusterLaunch; break;
    case cudaDevAttrClockRate: v = 1980000; break;          /* kHz, H100 SXM5 boost */
    case cudaDevAttrMemoryClockRate: v = 2619000; break;    /* kHz, HBM3 */
    default: v = 0; break;
    }
    return v;
}
