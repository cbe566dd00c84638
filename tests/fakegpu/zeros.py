"""Real PyTorch on the fake GPU: import, device properties, the first tensor.

Run by tests/fakegpu/run-torch.sh (fake GPU first on LD_LIBRARY_PATH, the
pinned wheel on PYTHONPATH). Asserts from /proc/self/maps that the CUDA
libraries in the process are the fake ones (the real CUDA 13 libraries are in
the loader's cache and would otherwise be picked silently), then the values
the fake devices are specified to have (tests/doubles/README.md).
"""
import os
import re
import sys

import torch

FAKE = os.environ['FAKE_GPU_DIR']
MiB = 1 << 20


def mapped_cuda_libs():
    """{soname-ish basename: path} of every CUDA-family library mapped."""
    libs = {}
    with open('/proc/self/maps') as fh:
        for line in fh:
            m = re.search(r'(/\S*/(lib(?:cuda|cudart|cublas|cublasLt|cudnn\w*|cufft|cufile|curand|cusolver|'
                          r'cusparse|cusparseLt|nccl|nvrtc|nvJitLink|nvshmem_host|cupti)\.so[.\d]*))$', line)
            if m:
                libs[m.group(2)] = m.group(1)
    return libs


def check(cond, what):
    print(('ok   ' if cond else 'FAIL ') + what)
    return bool(cond)


ok = True
torch.backends.cudnn.enabled = False
ok &= check(torch.version.cuda == '13.0', f'wheel built for CUDA 13.0 (torch {torch.__version__}, cuda {torch.version.cuda})')
ok &= check(torch.cuda.is_available(), 'torch.cuda.is_available()')
ndev = int(os.environ.get('MOCK_CUDA_DEVICES', '8'))
cap = int(os.environ.get('MOCK_CUDA_CAPACITY', str(80 << 30)))
ctx = int(os.environ.get('MOCK_CUDA_CONTEXT_BYTES', str(512 * MiB)))
ok &= check(torch.cuda.device_count() == ndev, f'device_count {torch.cuda.device_count()} == MOCK_CUDA_DEVICES {ndev}')

x = torch.zeros(1, device='cuda')
ok &= check(x.device.type == 'cuda' and x.sum().item() == 0.0, 'torch.zeros(1, device="cuda"), read back as 0')
p = torch.cuda.get_device_properties(0)
ok &= check(p.name == 'NVIDIA H100 80GB HBM3', f'name {p.name!r}')
ok &= check((p.major, p.minor) == (9, 0), f'compute capability {p.major}.{p.minor}')
ok &= check(p.multi_processor_count == 132, f'SMs {p.multi_processor_count}')
ok &= check(p.total_memory == cap, f'total_memory {p.total_memory} == MOCK_CUDA_CAPACITY {cap}')
# The caching allocator rounds a 4-byte tensor to a 512-byte block in a
# 2 MiB segment (its small-allocation pool), so the device's used memory is
# the context plus that segment: one cudaMalloc, or with expandable segments
# cuMemCreate'd pages, which cudaMemGetInfo must see too (one device memory
# state for the fake runtime and driver).
expandable = 'expandable_segments:True' in os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '')
ok &= check(torch.cuda.memory_allocated() == 512, f'memory_allocated {torch.cuda.memory_allocated()} == 512')
ok &= check(torch.cuda.memory_reserved() == 2 * MiB, f'memory_reserved {torch.cuda.memory_reserved()} == 2 MiB')
y = torch.empty(300 * MiB, dtype=torch.uint8, device='cuda')
res = torch.cuda.memory_reserved()
free, total = torch.cuda.mem_get_info()
ok &= check(res >= 302 * MiB, f'memory_reserved {res} holds the 300 MiB tensor (expandable: {expandable})')
ok &= check((free, total) == (cap - ctx - res, cap),
            f'mem_get_info ({free}, {total}) == capacity - context - reserved ({cap - ctx - res})')
del y

# A load-only stub is loaded, never used: a call says so and fails with the
# library's "not supported" status (cuFFT: CUFFT_NOT_SUPPORTED = 16).
import ctypes
cufft = ctypes.CDLL('libcufft.so.12')
plan = ctypes.c_int(0)
ok &= check(cufft.cufftCreate(ctypes.byref(plan)) == 16, 'a load-only stub (cufftCreate) returns CUFFT_NOT_SUPPORTED')

libs = mapped_cuda_libs()
for need in ('libcudart.so.13', 'libcuda.so.1', 'libcublas.so.13', 'libcublasLt.so.13', 'libnccl.so.2'):
    ok &= check(need in libs, f'{need} is mapped')
for name, path in sorted(libs.items()):
    ok &= check(os.path.dirname(path) == FAKE, f'{name} comes from the fake GPU ({path})')
sys.exit(0 if ok else 1)
