"""The torchrun stand-in: expands a preset into Megatron flags, then starts
one process per rank (python3 pretrain_gpt.py <flags>) with torchrun's
environment (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT), each on its own
simulated device. The launcher itself never touches CUDA (no trace)."""
import os
import shutil
import subprocess
import tempfile
import sys
import threading

from .config import PRESETS, build_parser, finalize, ConfigError

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIB = 1 << 30


def expand(argv):
    argv = list(argv)
    out = []
    i = 0
    preset = []
    while i < len(argv):
        if argv[i] == "--sim-preset":
            preset = PRESETS[argv[i + 1]]
            i += 2
            continue
        out.append(argv[i])
        i += 1
    # drop preset flags the user sets again (the recorded command line stays unambiguous)
    user = {a for a in out if a.startswith("--")}
    # one setting, two spellings: either replaces the preset's other
    for pair in (("--disable-bias-linear", "--add-bias-linear"),):
        if user & set(pair):
            user |= set(pair)
    kept, i = [], 0
    while i < len(preset):
        j = i + 1
        while j < len(preset) and not preset[j].startswith("--"):
            j += 1
        if preset[i] not in user:
            kept += preset[i:j]
        i = j
    return kept + out


_out_lock = threading.Lock()


def _prefix_lines(pipe, dest, prefix):
    """Copy a rank's output to dest, each line prefixed (one write per line,
    so ranks' lines never interleave mid-line)."""
    for line in iter(pipe.readline, b""):
        with _out_lock:
            dest.write(prefix + line)
            dest.flush()
    pipe.close()


def _start(r, argv, env, prefixed):
    """Start rank r; with prefixed, its stdout/stderr lines carry "[rank R]: "
    as torchrun's --tee/--log-line-prefix-template output does."""
    if not prefixed:
        return subprocess.Popen(argv, env=env), []
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    tag = ("[rank %d]: " % r).encode()
    ts = [threading.Thread(target=_prefix_lines, args=(p.stdout, sys.stdout.buffer, tag)),
          threading.Thread(target=_prefix_lines, args=(p.stderr, sys.stderr.buffer, tag))]
    for t in ts:
        t.start()
    return p, ts


def main(argv):
    if argv and argv[0] in ("-h", "--help"):
        build_parser().print_help()
        print("\npresets: " + ", ".join(sorted(PRESETS)))
        return 0
    flags = expand(argv)
    try:
        args = finalize(build_parser().parse_args(flags))
    except (ConfigError, AssertionError, ValueError) as e:
        print("%s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1
    tp, pp, cp = (args.tensor_model_parallel_size, args.pipeline_model_parallel_size,
                  args.context_parallel_size)
    world = args.sim_world_size or tp * pp * cp * args.sim_dp
    per_node = min(world, 8)
    only = None
    if args.sim_only_ranks:
        only = [int(x) for x in args.sim_only_ranks.split(",")]
    env0 = dict(os.environ)
    env0.update({
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(per_node),
        "MASTER_ADDR": env0.get("MASTER_ADDR", "127.0.0.1"),
        "MASTER_PORT": env0.get("MASTER_PORT", "29500"),
        "TORCHELASTIC_RUN_ID": env0.get("TORCHELASTIC_RUN_ID", "megasim"),
        "TORCHELASTIC_RESTART_COUNT": env0.get("TORCHELASTIC_RESTART_COUNT", "0"),
        "MOCK_CUDA_DEVICES": str(max(8, per_node)),
        "PYTHONUNBUFFERED": "1",
    })
    if args.sim_capacity_gib:
        env0["MOCK_CUDA_CAPACITY"] = str(int(args.sim_capacity_gib * GIB))
    if args.sim_foreign_gib:
        ctx = int(env0.get("MOCK_CUDA_CONTEXT_BYTES", str(512 << 20)))
        env0["MOCK_CUDA_CONTEXT_BYTES"] = str(ctx + int(args.sim_foreign_gib * GIB))
    # the "driver": the mock libcuda.so.1 next to the mock libcudart (the mock
    # runtime dlopen()s it by soname, as the real one does from the system)
    libdir = os.environ.get("MEGASIM_LIB_DIR")
    if libdir:
        doubles = os.path.normpath(os.path.join(os.path.abspath(libdir), "..", "doubles"))
        if os.path.exists(os.path.join(doubles, "libcuda.so.1")):
            old = env0.get("LD_LIBRARY_PATH")
            env0["LD_LIBRARY_PATH"] = doubles + (":" + old if old else "")
    script = os.path.join(HERE, "pretrain_gpt.py")
    # MEGASIM_RANK_PREFIX=1: every line of a rank's output starts "[rank R]: "
    prefixed = os.environ.get("MEGASIM_RANK_PREFIX", "") not in ("", "0")
    procs = []
    launched = [r for r in range(world) if only is None or r in only]
    barrier = tempfile.mkdtemp(prefix="megasim-barrier.")
    env0["MEGASIM_EXIT_BARRIER"] = "%s:%d" % (barrier, len(launched))
    for r in range(world):
        if only is not None and r not in only:
            continue
        env = dict(env0, RANK=str(r), LOCAL_RANK=str(r % per_node), GROUP_RANK=str(r // per_node))
        procs.append((r,) + _start(r, [sys.executable, script] + flags, env, prefixed))
    failed = []
    for r, p, threads in procs:
        rc = p.wait()
        for t in threads:
            t.join()
        if rc:
            failed.append((r, rc))
    shutil.rmtree(barrier, ignore_errors=True)
    if failed:
        print("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:", file=sys.stderr)
        print("%s FAILED" % os.path.basename(script), file=sys.stderr)
        for r, rc in failed:
            print("  rank: %d (local_rank: %d) exitcode: %d" % (r, r % per_node, rc), file=sys.stderr)
        return 1
    return 0
