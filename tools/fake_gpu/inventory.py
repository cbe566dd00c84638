#!/usr/bin/env python3
"""fake-gpu inventory: what a PyTorch CUDA wheel needs from the CUDA libraries.

Usage: inventory.py [--md FILE] [--tsv FILE] [--cuda-lib DIR] TORCH_DIR
       inventory.py --objects [--preloaded SONAME ...] [--md ...] [--tsv ...] DIR

With --objects, DIR is any installed package (Transformer Engine's, issue 16):
every ELF shared object under it, recursively, is listed, and each
--preloaded SONAME counts as needed by every object (a library the package's
Python loader opens RTLD_GLOBAL before them: TE's libnvrtc.so.13, whose
symbols its core library leaves undefined without a DT_NEEDED).

TORCH_DIR is an installed wheel's `torch` package directory (the one holding
`lib/` and `_C*.so`). For every ELF library of the wheel it lists, from
`readelf -d` / `readelf -V` / `readelf --dyn-syms` (binutils):

  - the needed libraries (DT_NEEDED) and the RUNPATH,
  - the version nodes it needs from each library (`.gnu.version_r`),
  - each undefined dynamic symbol that a CUDA-family library must provide,
    attributed to that library: by its version node when it has one
    (`cudaMalloc@libcudart.so.13`), else by the unique CUDA-family library the
    object needs that exports it on this machine (CUDA_LIB, default
    /usr/local/cuda/lib64), else by a prefix rule for libraries the machine
    does not have (PREFIX_OWNERS below, from the libraries' own API names),
  - the sonames the wheel may dlopen at run time (sonames of CUDA-family
    libraries found as strings in its objects).

The TSV (lib, symbol, version, users) is the machine-readable specification
the fake GPU's doubles and load-only stubs are generated from; the Markdown is
its readable form (docs/validation/fake-gpu-inventory.md).

Errors: exits 2 with a message naming the directory when TORCH_DIR has no
lib/ directory or readelf is missing; a library readelf cannot read is named
and the run fails (exit 2) rather than produce an incomplete specification.
"""
import argparse
import collections
import os
import re
import subprocess
import sys

# Libraries that belong to the CUDA stack (the fake GPU's business); every
# other needed library (glibc, libstdc++, torch's own) is not listed.
CUDA_FAMILY = re.compile(
    r'^lib(cuda|cudart|cublas|cublasLt|cudnn[a-z_]*|cufft|cufftw|cufile|curand|cusolver|'
    r'cusolverMg|cusparse|cusparseLt|nccl|nvrtc|nvJitLink|nvshmem_host|cupti|nvToolsExt|'
    r'nvtx3interop)\.so(\.[0-9.]+)?$')

# Owners of API prefixes for CUDA-family libraries that carry no symbol
# versions and may be absent from the machine (their public API prefixes).
PREFIX_OWNERS = [
    ('cusparseLt', 'libcusparseLt.so.0'),
    ('cuFile', 'libcufile.so.0'),
    ('nvshmem', 'libnvshmem_host.so.3'),
    ('nccl', 'libnccl.so.2'),
    ('cu', 'libcuda.so.1'),   # driver API: cuInit, cuMemCreate, ... (checked last)
]


# How the fake GPU provides each library (the plan this inventory specifies):
# doubles are tests/doubles' hand-written fakes (every symbol of the
# inventory they do not implement is a generated "not supported" stub);
# load-only stubs are generated from the inventory alone (right SONAME and
# version nodes; every call prints one line and fails).
PROVIDERS = {
    'libcudart.so.13': 'double (runtime: devices, memory, streams, events, graphs, registration, launches)',
    'libcuda.so.1': 'double (driver: entry points, contexts, VMM for expandable segments)',
    'libcublas.so.13': 'double (handles, workspaces, matmuls accepted)',
    'libcublasLt.so.13': 'double (heuristics return one algorithm, matmuls accepted)',
    'libnccl.so.2': 'double (communicators, collectives accepted, async-error polls)',
    'libcudnn.so.9': 'double (cudnnGetVersion: the pinned 9.19.0; every other call prints one line and fails)',
}
LOAD_ONLY = 'load-only stub (loaded, never initialised; a call prints one line and fails)'

# Driver API names as strings in the objects: the entry points fetched at run
# time (cudaGetDriverEntryPoint*/cuGetProcAddress/dlsym), which no dynamic
# symbol table shows. The families keep random byte runs ("cuZfr") out.
DRIVER_NAME = re.compile(
    rb'cu(?:Ctx|Dev|Device|Mem|Stream|Get|Green|Multicast|Init|Launch|Link|Func|Occupancy|'
    rb'Pointer|Tensor|Event|Graph|Module|Library|Kernel)[A-Za-z0-9_]*')


def readelf(*args):
    """Run readelf -W ARGS; return stdout. Raises SystemExit(2) on failure."""
    try:
        res = subprocess.run(['readelf', '-W', *args], capture_output=True, text=True)
    except FileNotFoundError:
        sys.exit('inventory: readelf not found (install binutils)')
    if res.returncode != 0:
        sys.exit(f'inventory: readelf {" ".join(args)} failed: {res.stderr.strip()}')
    return res.stdout


def dynamic(path):
    """DT_NEEDED list, DT_SONAME and DT_RUNPATH/RPATH of the ELF file PATH."""
    needed, soname, runpath = [], None, None
    for line in readelf('-d', path).splitlines():
        m = re.search(r'\((NEEDED|SONAME|RUNPATH|RPATH)\)\s+.*\[(.*)\]', line)
        if not m:
            continue
        if m.group(1) == 'NEEDED':
            needed.append(m.group(2))
        elif m.group(1) == 'SONAME':
            soname = m.group(2)
        else:
            runpath = m.group(2)
    return needed, soname, runpath


def version_needs(path):
    """{library: [version node, ...]} from PATH's .gnu.version_r."""
    needs, cur = collections.OrderedDict(), None
    for line in readelf('-V', path).splitlines():
        m = re.search(r'File: (\S+)\s+Cnt:', line)
        if m:
            cur = m.group(1)
            needs[cur] = []
            continue
        m = re.search(r'Name: (\S+)\s+Flags:', line)
        if m and cur is not None:
            needs[cur].append(m.group(1))
    return needs


def dyn_symbols(path):
    """(undefined, defined) dynamic symbols of PATH.

    undefined: list of (name, version or None, FUNC/OBJECT/...); defined: set of names.
    """
    undef, defined = [], set()
    for line in readelf('--dyn-syms', path).splitlines():
        f = line.split()
        if len(f) < 8 or not f[0].rstrip(':').isdigit():
            continue
        name = f[7]
        ver = None
        if '@' in name:
            name, _, ver = name.partition('@')
            ver = ver.lstrip('@')
        if f[6] == 'UND':
            if name and f[4] != 'WEAK':
                undef.append((name, ver, f[3]))
        elif f[4] in ('GLOBAL', 'WEAK'):
            defined.add(name)
    return undef, defined


def machine_exports(cuda_lib, sonames):
    """{soname: set of exported names} for the sonames present in cuda_lib."""
    out = {}
    for so in sonames:
        p = os.path.join(cuda_lib, so)
        if os.path.exists(p):
            out[so] = dyn_symbols(p)[1]
    return out


def owner(name, ver, needed_cuda, exports, vernode_owner):
    """The CUDA-family library that must define undefined symbol NAME, or None."""
    if ver is not None:
        return vernode_owner.get(ver)
    hits = [so for so in needed_cuda if name in exports.get(so, ())]
    if len(hits) == 1:
        return hits[0]
    for prefix, so in PREFIX_OWNERS:
        if name.startswith(prefix) and (so in needed_cuda or so == 'libcuda.so.1'):
            if so == 'libcuda.so.1' and not re.match(r'^cu[A-Z]', name):
                continue
            return so if so in needed_cuda else None
    return hits[0] if hits else None


def wheel_objects(torch_dir):
    """Sorted paths of the wheel's ELF shared objects (torch/lib/*.so*, torch/_C*.so)."""
    lib = os.path.join(torch_dir, 'lib')
    if not os.path.isdir(lib):
        sys.exit(f'inventory: {torch_dir}: no lib/ directory (not an installed torch package)')
    objs = [os.path.join(lib, f) for f in os.listdir(lib) if re.search(r'\.so(\.\d+)*$', f)]
    objs += [os.path.join(torch_dir, f) for f in os.listdir(torch_dir)
             if f.startswith('_C') and f.endswith('.so')]
    return sorted(o for o in objs if os.path.isfile(o))


def strings_of(path):
    """(CUDA-family sonames, driver API names) found as NUL-terminated strings in PATH."""
    sonames, driver = set(), set()
    with open(path, 'rb') as fh:
        data = fh.read()
    for m in re.finditer(rb'(?<=\0)lib[A-Za-z0-9_]+\.so(?:\.[0-9]+)*(?=\0)', data):
        s = m.group(0).decode()
        if CUDA_FAMILY.match(s):
            sonames.add(s)
    for m in re.finditer(rb'(?<=\0)' + DRIVER_NAME.pattern + rb'(?=\0)', data):
        driver.add(m.group(0).decode())
    return sonames, driver


def package_objects(top):
    """Sorted paths of every ELF shared object (*.so, *.so.N) under TOP, recursively."""
    if not os.path.isdir(top):
        sys.exit(f'inventory: {top}: not a directory')
    objs = []
    for d, _, files in os.walk(top):
        objs += [os.path.join(d, f) for f in files if re.search(r'\.so(\.\d+)*$', f)]
    with_elf = []
    for o in objs:
        with open(o, 'rb') as fh:
            if fh.read(4) == b'\x7fELF':
                with_elf.append(o)
    return sorted(with_elf)


def collect(torch_dir, cuda_lib, objects=False, preloaded=()):
    """The inventory: per object its needs, and per CUDA library its symbols.

    objects: TORCH_DIR is any package (package_objects); preloaded: sonames
    counted as needed by every object (see the module docstring)."""
    objs = package_objects(torch_dir) if objects else wheel_objects(torch_dir)
    per_obj, symbols, dl = {}, collections.defaultdict(dict), collections.defaultdict(set)
    entry = collections.defaultdict(set)
    all_cuda = set()
    for o in objs:
        needed, _, runpath = dynamic(o)
        vneeds = version_needs(o)
        cuda_needed = [n for n in needed if CUDA_FAMILY.match(n)]
        cuda_needed += [n for n in preloaded if n not in cuda_needed]
        all_cuda.update(cuda_needed)
        per_obj[o] = (needed, runpath, vneeds, cuda_needed)
        sonames, driver = strings_of(o)
        for so in sonames - set(cuda_needed):
            dl[so].add(os.path.basename(o))
        for name in driver:
            entry[name].add(os.path.basename(o))
    exports = machine_exports(cuda_lib, all_cuda)
    unowned = collections.defaultdict(list)
    for o, (needed, runpath, vneeds, cuda_needed) in per_obj.items():
        vernode_owner = {v: lib for lib, vs in vneeds.items() for v in vs if CUDA_FAMILY.match(lib)}
        undef, _ = dyn_symbols(o)
        for name, ver, kind in undef:
            lib = owner(name, ver, cuda_needed, exports, vernode_owner)
            if lib is None:
                if ver is None and re.match(r'^(cu|nccl|nvshmem|cudnn)', name):
                    unowned[os.path.basename(o)].append(name)
                continue
            ent = symbols[lib].setdefault(name, [ver, set(), kind])
            ent[1].add(os.path.basename(o))
    return objs, per_obj, symbols, dl, exports, unowned, entry


def write_tsv(fh, symbols, entry):
    """lib<TAB>symbol<TAB>version<TAB>kind<TAB>users, sorted.

    kind is the ELF symbol type (FUNC), or ENTRY for a driver entry point
    found only as a string (the fake libcuda.so.1 must export it too, for
    cuGetProcAddress to hand out).
    """
    rows = {lib: dict(syms) for lib, syms in symbols.items()}
    drv = rows.setdefault('libcuda.so.1', {})
    for name, users in entry.items():
        drv.setdefault(name, [None, users, 'ENTRY'])
    fh.write('# lib\tsymbol\tversion\tkind\tused_by\n')
    for lib in sorted(rows):
        for name in sorted(rows[lib]):
            ver, users, kind = rows[lib][name]
            fh.write(f'{lib}\t{name}\t{ver or "-"}\t{kind}\t{",".join(sorted(users))}\n')


def write_md(fh, torch_dir, cuda_lib, inv, header):
    """The readable inventory (tables per object, then per library)."""
    objs, per_obj, symbols, dl, exports, unowned, entry = inv
    w = fh.write
    w(header)
    w('## Needed libraries per object\n\n| object | CUDA-family DT_NEEDED | version nodes needed from them |\n|---|---|---|\n')
    for o in objs:
        needed, runpath, vneeds, cuda_needed = per_obj[o]
        nodes = '; '.join(f'{lib}: {", ".join(vs)}' for lib, vs in vneeds.items() if CUDA_FAMILY.match(lib))
        w(f'| `{os.path.relpath(o, torch_dir)}` | {", ".join(cuda_needed) or "—"} | {nodes or "—"} |\n')
    rp = {per_obj[o][1] for o in objs if per_obj[o][1]}
    w('\nRUNPATH of the objects: ' + '; '.join(f'`{r}`' for r in sorted(rp)) +
      ' (LD_LIBRARY_PATH is searched before RUNPATH, so a fake on it wins).\n')
    w('\n## Libraries loaded with dlopen (names found in the objects, not DT_NEEDED there)\n\n')
    for so in sorted(dl):
        w(f'- `{so}`: named in {", ".join(sorted(dl[so]))}\n')
    w('\n## Driver API names found as strings (entry points fetched at run time)\n\n'
      'The fake `libcuda.so.1` must hand these out through `cuGetProcAddress`/'
      '`cudaGetDriverEntryPoint*` (c10\'s driver wrapper checks its set at first use):\n\n')
    for name in sorted(entry):
        w(f'- `{name}` ({", ".join(sorted(entry[name]))})\n')
    w(f'\n## Undefined symbols per CUDA library\n\nOn this machine (`{cuda_lib}`): ')
    w(', '.join(f'{so} {"present" if so in exports else "ABSENT"}' for so in sorted(symbols)) + '.\n\n')
    w('| library | symbols | versioned | used by | provided by the fake GPU as |\n|---|---|---|---|---|\n')
    for lib in sorted(symbols):
        syms = symbols[lib]
        nver = sum(1 for v, _, _ in syms.values() if v)
        users = sorted(set().union(*(u for _, u, _ in syms.values())))
        w(f'| {lib} | {len(syms)} | {nver} | {", ".join(users)} | {PROVIDERS.get(lib, LOAD_ONLY)} |\n')
    if unowned:
        w('\nCUDA-looking undefined symbols with no owner found (not counted above):\n\n')
        for o, names in sorted(unowned.items()):
            w(f'- {o}: {", ".join(sorted(names))}\n')
    for lib in sorted(symbols):
        w(f'\n### {lib}\n\n')
        names = sorted(symbols[lib])
        w(', '.join(f'`{n}`' for n in names) + '\n')


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('torch_dir')
    ap.add_argument('--md')
    ap.add_argument('--tsv')
    ap.add_argument('--cuda-lib', default=os.environ.get('CUDA_LIB', '/usr/local/cuda/lib64'))
    ap.add_argument('--title', default='')
    ap.add_argument('--objects', action='store_true')
    ap.add_argument('--preloaded', action='append', default=[])
    a = ap.parse_args()
    inv = collect(a.torch_dir, a.cuda_lib, a.objects, a.preloaded)
    header = a.title.replace('\\n', '\n') if a.title else '# Fake GPU inventory\n\n'
    if a.md:
        with open(a.md, 'w') as fh:
            write_md(fh, a.torch_dir, a.cuda_lib, inv, header)
    if a.tsv:
        with open(a.tsv, 'w') as fh:
            write_tsv(fh, inv[2], inv[6])
    if not a.md and not a.tsv:
        write_md(sys.stdout, a.torch_dir, a.cuda_lib, inv, header)
    return 0


if __name__ == '__main__':
    sys.exit(main())
