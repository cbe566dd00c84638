"""python3 -m megasim.describe FLAGS...: one line saying what
`python3 -m megasim FLAGS...` would run (the preset, model shape, layout,
batch, iterations, recompute), computed by the launcher's own flag expansion
and validation; a flag error is printed as megasim prints it (exit 1).
tools/run-main.sh prints it as its banner."""
import sys

from .config import build_parser, finalize, ConfigError
from .launch import expand


def _recompute(a):
    if a.recompute_granularity == "full":
        return "full %s %s" % (a.recompute_method, a.recompute_num_layers)
    if a.recompute_granularity == "selective":
        return "selective %s" % " ".join(a.recompute_modules or ["core_attn"])
    return "none"


def describe(argv):
    """The one-line description of the job argv runs; raises megasim's own
    ConfigError/AssertionError/ValueError for flags it rejects."""
    a = finalize(build_parser().parse_args(expand(argv)))
    preset = argv[argv.index("--sim-preset") + 1] if "--sim-preset" in argv else "custom"
    tp, pp, cp = a.tensor_model_parallel_size, a.pipeline_model_parallel_size, a.context_parallel_size
    world = a.sim_world_size or tp * pp * cp * a.sim_dp
    if world % (tp * pp * cp):
        layout = "TP=%d PP=%d CP=%d: world size %d is not divisible by TP*PP*CP" % (tp, pp, cp, world)
    else:
        layout = "TP=%d PP=%d CP=%d DP=%d" % (tp, pp, cp, world // (tp * pp * cp))
    only = ", only ranks %s run" % a.sim_only_ranks if a.sim_only_ranks else ""
    # training.py's default: one micro-batch per data-parallel rank
    dp = world // (tp * pp * cp) if world % (tp * pp * cp) == 0 else 1
    gbs = ("global batch %d, micro-batch %d" % (a.global_batch_size, a.micro_batch_size)
           if a.global_batch_size else
           "global batch %d (default: micro-batch x DP), micro-batch %d"
           % (a.micro_batch_size * dp, a.micro_batch_size))
    opt = ", distributed optimizer" if a.use_distributed_optimizer else ""
    return ("%s (%d layers, hidden %d, seq %d) on %d ranks (%s)%s; %s; %d iteration(s); "
            "recompute: %s%s" % (preset, a.num_layers, a.hidden_size, a.seq_length, world, layout,
                                 only, gbs, a.train_iters or 3, _recompute(a), opt))


def main(argv):
    try:
        print(describe(argv))
    except (ConfigError, AssertionError, ValueError) as e:
        print("%s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
