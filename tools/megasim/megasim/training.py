"""One rank of the simulated job: megatron/training/training.py's order
([M] in docs/sources.md): build model, DDP buffers, optimizer (fp32 main params;
Adam moments lazily at the first step), then train_step = zero grads ->
forward_backward_func (no pipelining / 1F1B / interleaved) ->
finalize_model_grads -> optimizer.step. Forward, finalize_model_grads and the
optimizer run on the main thread; backward on pt_autograd_<dev>.
"""
import os
import sys

from . import autograd as ag
from . import cuda
from . import te
from .cuda import Tensor, GIB, MIB
from .model import GPTModel, NV, nvtx_range
from .sizes import Shapes, layer_kind
from .hybrid import MambaDims

P2P = "megatron.core.pipeline_parallel.p2p_communication."
# bytes per element of Megatron's dtype choices (--exp-avg-dtype, --main-grads-dtype, ...)
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
SCHED = "megatron.core.pipeline_parallel.schedules.forward_backward_pipelining_with_interleaving."


class Parallel:
    """Megatron's default rank order tp-cp-ep-dp-pp ([M] in docs/sources.md)."""

    def __init__(self, args, rank, world):
        self.tp = args.tensor_model_parallel_size
        self.pp = args.pipeline_model_parallel_size
        self.cp = args.context_parallel_size
        self.ep = args.expert_model_parallel_size
        self.etp = args.expert_tensor_parallel_size
        mp = self.tp * self.cp * self.pp
        if world % mp:
            raise ValueError("world size (%d) is not divisible by tensor_model_parallel_size (%d) x "
                             "context_parallel_size (%d) x pipeline_model_parallel_size (%d)"
                             % (world, self.tp, self.cp, self.pp))
        self.dp = world // mp
        if world % (self.etp * self.ep * self.pp):
            raise ValueError("world size (%d) is not divisible by expert_tensor_parallel_size (%d) x "
                             "expert_model_parallel_size (%d) x pipeline_model_parallel_size (%d)"
                             % (world, self.etp, self.ep, self.pp))
        self.edp = world // (self.etp * self.ep * self.pp)
        self.tp_rank = rank % self.tp
        self.cp_rank = (rank // self.tp) % self.cp
        self.dp_rank = (rank // (self.tp * self.cp)) % self.dp
        self.pp_rank = rank // (self.tp * self.cp * self.dp)
        self.vp = 1
        if args.num_layers_per_virtual_pipeline_stage:
            self.vp = args.num_layers // self.pp // args.num_layers_per_virtual_pipeline_stage
        elif args.num_virtual_stages_per_pipeline_rank:
            self.vp = args.num_virtual_stages_per_pipeline_rank

    def stage_counts(self, args):
        """layers per pipeline stage, all its chunks together: --num-layers / PP,
        or the uneven first/last stage's own count
        (--decoder-first/last-pipeline-num-layers) and the rest over the
        other stages (megatron-core 0.19.2 get_num_layers_to_build before its
        division by VPP)"""
        L, pp = args.num_layers, self.pp
        first, last = args.decoder_first_pipeline_num_layers, args.decoder_last_pipeline_num_layers
        counts = [None] * pp
        if first is not None:
            counts[0] = first
        if last is not None and pp > 1:
            counts[-1] = last
        rest = L - sum(c for c in counts if c is not None)
        free = [i for i in range(pp) if counts[i] is None]
        for j, i in enumerate(free):
            counts[i] = rest // len(free) + (1 if j < rest % len(free) else 0)
        return counts

    def chunk_layers(self, args):
        """global layer indices per model chunk of this stage. Interleaved
        (VPP): every stage's chunk c holds its stage's layers / VPP, and chunk
        c of stage p starts after chunks 0..c-1 of every stage and chunk c of
        stages 0..p-1 (megatron-core 0.19.2 get_num_layers_to_build and
        get_transformer_layer_offset, uneven first/last stages included)"""
        vp = self.vp
        counts = self.stage_counts(args)
        if vp > 1:
            bad = [n for n in counts if n % vp]
            if bad:
                raise ValueError("num_layers_per_pipeline_rank %d should be divisible by vp_size "
                                 "%d" % (bad[0], vp))
            per = [n // vp for n in counts]
            return [list(range(c * sum(per) + sum(per[:self.pp_rank]),
                               c * sum(per) + sum(per[:self.pp_rank + 1]))) for c in range(vp)]
        start = sum(counts[:self.pp_rank])
        return [list(range(start, start + counts[self.pp_rank]))]


def bias_counts(args, S, layer_number):
    """(dense, expert) bias elements of one layer on this rank with
    add_bias_linear (megatron-core 0.19.2: linear_qkv, column-parallel, and
    linear_proj, row-parallel, in attention.py; MLA's linear_proj only, its
    projections are built with bias=False; linear_fc1 and linear_fc2 in
    mlp.py, also each local expert's; shared experts refuse biases; the
    router has none). A row-parallel bias is whole on every TP rank."""
    if not args.add_bias_linear:
        return 0, 0
    h, t = S.h, S.t
    attn = h + (0 if S.mla else (S.a + 2 * S.g) * S.dh // t)
    if layer_kind(args, layer_number) == "moe":
        return attn, (S.E // S.ep) * (S.gamma * S.fe // S.etp + h)
    return attn + S.gamma * S.f // t + h, 0


def param_counts(args, S, layer_number):
    """(dense params, expert params) of one layer on this rank, biases
    included (bias_counts)."""
    bd, be = bias_counts(args, S, layer_number)
    d, e = _weight_counts(args, S, layer_number)
    return d + bd, e + be


def _weight_counts(args, S, layer_number):
    """(dense, expert) weight and norm elements of one layer on this rank."""
    h, t = S.h, S.t
    kind = layer_kind(args, layer_number)
    if kind == "mamba":
        return MambaDims(args).params(h, t), 0
    if kind == "mlp":                       # hybrid MLP-only layer (fc1 with its fused norm)
        return h + (h * S.gamma * S.f + S.f * h) // t, 0
    if S.mla:
        if S.rq:
            attn = h * S.rq + S.rq + S.rq * S.a * (S.dqk + S.dr) // t
        else:
            attn = h * S.a * (S.dqk + S.dr) // t
        attn += h * (S.rkv + S.dr) + S.rkv + S.rkv * S.a * (S.dqk + S.dv) // t + S.a * S.dv * h // t + h
    else:
        attn = h * (S.a + 2 * S.g) * S.dh // t + S.a * S.dh * h // t + h
    if kind == "attention":                 # hybrid attention-only layer
        return attn, 0
    if kind == "moe":
        if getattr(args, "hybrid_kinds", None):
            attn = 0                        # hybrid MoE-only layer
        local_experts = S.E // S.ep
        expert = local_experts * (h * S.gamma * S.fe + S.fe * h) // S.etp
        dense = attn + h + h * S.E + ((h * S.gamma * S.fsh + S.fsh * h) // t if S.fsh else 0)
        return dense, expert
    return attn + h + (h * S.gamma * S.f + S.f * h) // t, 0


# megasim's range around a checkpoint save (the analyzer's checkpoint_save phase)
SAVE_RANGE = "megatron.training.checkpointing.save_checkpoint"


def ddp_buckets(elems, dp, overlap_grad_reduce):
    """element counts of a DDP buffer's buckets (distributed_data_parallel.py:
    one bucket without --overlap-grad-reduce, else about max(4e7, 1e6 x DP)
    elements each; Megatron ends buckets at parameter boundaries, megasim
    cuts evenly), each padded to a multiple of DP"""
    if not elems:
        return []
    size = elems if not overlap_grad_reduce else max(40000000, 1000000 * dp)
    out = []
    while elems > 0:
        b = min(size, elems)
        out.append((b + dp - 1) // dp * dp)
        elems -= b
    return out


def offload_split(shards, fraction):
    """HybridDeviceOptimizer._get_sub_optimizer_param_groups ([M] in
    docs/sources.md): walking the params in order, a param goes to the host
    while the elements offloaded so far are below fraction x all elements (so
    the param that crosses the threshold goes too). shards: (name, full
    elements, elements the optimizer holds). Returns (elements offloaded, the
    shards kept on the device)."""
    threshold = sum(s[2] for s in shards) * fraction
    off, kept = 0, []
    for s in shards:
        if off < threshold:
            off += s[2]
        else:
            kept.append(s)
    return off, kept


class Rank:
    def __init__(self, args):
        self.args = args
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.par = Parallel(args, self.rank, self.world)
        self.S = Shapes(args)
        self.dev = cuda.device()
        self.quiet = args.sim_quiet
        self.param_gather_pending = set()
        self.mb_base = 0

    def log(self, msg):
        if not self.quiet:
            print(msg, flush=True)

    # ------------------------------------------------------------------ setup
    def fork_worker(self):
        """--sim-fork-worker: a worker forked by the rank (a data loader's,
        multiprocessing's fork start method) touches CUDA itself: one 2 MiB
        cudaMalloc and its cudaFree straight through the runtime (its own
        trace, its header's ppid the rank's pid, the rank's environment),
        then os._exit(0), which runs no exit handler. The rank waits for it."""
        import ctypes
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                p = ctypes.c_uint64()
                if self.dev.lib.ms_malloc(2 * MIB, ctypes.byref(p)) == 0 and \
                        self.dev.lib.ms_free(p.value) == 0:
                    code = 0
            finally:
                os._exit(code)
        _, st = os.waitpid(pid, 0)
        assert os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0, "forked worker: status %#x" % st

    def setup(self):
        a, par, dev = self.args, self.par, self.dev
        if a.sim_colocated_pool_gib:
            colocated_engine_check()
        dev.set_device(self.local_rank)
        ag.RETAIN_REPLAY[0] = a.sim_retain_replay
        ag.GRAD_WORKSPACE[0] = int(a.sim_grad_workspace_mib * (1 << 20))
        dev.init_allocator()
        if a.sim_colocated_pool_gib:
            # fault: the colocated engine loads its weights and KV cache into its pool
            self.colocated_pool = dev.colocated_pool(self.local_rank,
                                                     int(a.sim_colocated_pool_gib * GIB))
        if a.sim_fragment:
            te.FRAGMENT[0] = a.sim_fragment_max_mib
        te.set_legacy(a.sim_te_legacy)
        if a.num_experts:
            te.GROUPED_GEMMS[0] = max(1, a.num_experts // par.ep)
        # NCCL communicators: init_process_group's, then Megatron's groups
        # (initialize_model_parallel). Fault --sim-nccl-buffers-mib: each
        # communicator allocates buffers at init and more, growing with the
        # number of communicators, when it connects at its first collective.
        self.nccl_bufs = []
        groups = [("world", self.world, self.rank), ("tp", par.tp, par.tp_rank),
                  ("pp", par.pp, par.pp_rank), ("dp", par.dp, par.dp_rank)]
        if par.cp > 1:
            groups.append(("cp", par.cp, par.cp_rank))
        if par.ep > 1 or a.num_experts:       # expert grid: etp-ep-edp-pp
            groups.append(("ep", par.ep, self.rank // par.etp % par.ep))
            groups.append(("edp", par.edp, self.rank // (par.etp * par.ep) % par.edp))
        if par.pp > 1 and par.pp_rank in (0, par.pp - 1):   # members only
            groups.append(("embd", 2, 0 if par.pp_rank == 0 else 1))
        groups += [("extra%d" % i, 1, 0) for i in range(a.sim_nccl_communicators)]
        mib = a.sim_nccl_buffers_mib
        for name, n, r in groups:
            dev.comm_init(name, n, r)
            if mib:
                self.nccl_bufs.append(dev.nccl_buffer(int(mib * MIB)))
        if mib:
            def connect(comm):
                k = len(dev.comm_used)
                self.nccl_bufs.append(dev.nccl_buffer(int(mib * MIB * k)))
            dev.on_first_use = connect
        # model chunks
        chunks = par.chunk_layers(a)
        nchunk = len(chunks)
        self.models = []
        for c, layers in enumerate(chunks):
            pre = par.pp_rank == 0 and c == 0
            post = par.pp_rank == par.pp - 1 and c == nchunk - 1
            self.models.append(GPTModel(a, layers, pre, post))
        self.build_params(chunks)
        self.by_length = {a.seq_length: (self.models, self.S)}    # --sim-seq-lengths
        self.engine = ag.AutogradEngine(dev)
        self.optimizer_state = []
        self.leaked, self.leaked_this_iter = [], False
        self.loaded_resident = None
        if a.sim_resume_optimizer:
            self.load_checkpoint()

    def build_params(self, chunks):
        """Model params (bf16, one tensor per weight), then DDP's contiguous
        buffers (_ParamAndGradBuffer: fp32 grads; with the distributed
        optimizer also a bf16 param buffer the params move into), then the
        optimizer's fp32 main params (shards with the distributed optimizer)."""
        a, S, par = self.args, self.S, self.par
        pb = S.beta
        dense_total = expert_total = 0
        self.layer_params = []
        params = []
        for c, layers in enumerate(chunks):
            m = self.models[c]
            if m.pre_process:
                n = S.V * S.h // S.t + (a.max_position_embeddings * S.h
                                        if a.position_embedding_type == "learned_absolute" else 0)
                params.append(Tensor(n * pb, "embedding.weight", "param"))
                self.layer_params.append(("embedding", n, 0))
                dense_total += n
            for l in layers:
                d, e = param_counts(a, S, l)
                for frac, nm in ((0.25, "self_attention"), (0.75, "mlp")):
                    params.append(Tensor(int(d * frac) * pb, "layer%d.%s" % (l, nm), "param"))
                if e:
                    params.append(Tensor(e * pb, "layer%d.experts" % l, "param"))
                self.layer_params.append(("layer%d" % l, d, e))
                dense_total += d
                expert_total += e
            if m.post_process:
                n = S.V * S.h // S.t + S.h
                params.append(Tensor(n * pb, "output_layer.weight", "param"))
                self.layer_params.append(("output_layer", n, 0))
                dense_total += n
        self.dense_params, self.expert_params = dense_total, expert_total
        # DDP wrap: main grads fp32, or --main-grads-dtype with the precision-aware optimizer
        gb = DTYPE_BYTES[a.main_grads_dtype]
        self.grad_buffers = [Tensor(dense_total * gb, "grad_buffer", "grad_buffer")]
        if expert_total:
            self.grad_buffers.append(Tensor(expert_total * gb, "expert_grad_buffer", "grad_buffer"))
        if a.use_distributed_optimizer:
            self.param_buffers = [Tensor(dense_total * pb, "param_buffer", "param")]
            if expert_total:
                self.param_buffers.append(Tensor(expert_total * pb, "expert_param_buffer", "param"))
            del params                    # params now view the buffer
        else:
            self.params = params
        # optimizer: fp32 main params (--main-params-dtype; DistributedOptimizer.__init__
        # shards them); main_param_elems: their element counts, for the Adam state
        self.main_params, self.main_param_elems = [], []
        mb = DTYPE_BYTES[a.main_params_dtype]
        shards = []
        for name, d, e in self.layer_params:
            for n, dp in ((d, par.dp), (e, par.edp)):
                if n:
                    shards.append((name, n, n // dp if a.use_distributed_optimizer else n))
        if a.optimizer_cpu_offload:
            self.build_hybrid_optimizer(shards)
            return
        for name, _, shard in shards:
            self.main_params.append(Tensor(shard * mb, name + ".main_param", "main_param"))
            self.main_param_elems.append(shard)

    def build_hybrid_optimizer(self, shards):
        """--optimizer-cpu-offload: Megatron-Core's HybridDeviceOptimizer
        (docs/megasim.md, "Optimizer CPU offload"). get_megatron_optimizer
        first builds one over the whole (unsharded) params, then
        DistributedOptimizer.__init__ builds it again over its shards; each
        offloads a prefix of its params (in order, while the offloaded count is
        below fraction x all) to pinned host memory and clones every other one
        to an fp32 copy on the device (param_update_in_fp32). The first one's
        copies are a transient here (freed once the second exists). The
        device's Adam moments (fp32: the dtype flags do not reach it) follow
        the kept shards at the first step. shards: (name, full elements, shard
        elements) in the optimizer's parameter order (megasim's granularity:
        one per layer's dense and expert weights)."""
        f = self.args.optimizer_offload_fraction
        first = [Tensor(n * 4, name + ".hdo_fp32_copy", "main_param")
                 for name, n, _ in offload_split([(nm, n, n) for nm, n, _ in shards], f)[1]]
        self.offloaded_elems, kept = offload_split(shards, f)
        for name, _, shard in kept:
            self.main_params.append(Tensor(shard * 4, name + ".main_param", "main_param"))
            self.main_param_elems.append(shard)
        del first

    def load_checkpoint(self):
        """Resume (fault): optimizer state created before the first forward by
        Megatron's init_state_fn while loading, plus the loaded state dict's
        transient duplicate."""
        loaded = [Tensor(p.nbytes * 2, "loaded_state", "ckpt") for p in self.main_params]

        def init_state_fn():
            # Megatron-Core's name: the optimizer's load_state_dict calls the
            # init_state_fn get_megatron_optimizer defines (docs/megasim.md)
            self.init_optimizer_state()
        init_state_fn()
        stages = self.args.sim_resume_resident_stages
        if stages and self.par.pp_rank in [int(x) for x in stages.split(",")]:
            self.loaded_resident = loaded      # fault: still referenced (train() frees it)
        del loaded

    def init_optimizer_state(self):
        """Adam's exp_avg and exp_avg_sq per main param, fp32 or, with
        --use-precision-aware-optimizer, --exp-avg-dtype / --exp-avg-sq-dtype."""
        a = self.args
        # --optimizer-cpu-offload: the hybrid optimizer's device Adam gets no dtype arguments
        m1, m2 = (4, 4) if a.optimizer_cpu_offload else (DTYPE_BYTES[a.exp_avg_dtype],
                                                         DTYPE_BYTES[a.exp_avg_sq_dtype])
        for n in self.main_param_elems:
            self.optimizer_state.append(Tensor(n * m1, "exp_avg", "optim"))
            self.optimizer_state.append(Tensor(n * m2, "exp_avg_sq", "optim"))

    # ------------------------------------------------------------- schedules
    def get_batch(self, model):
        S = self.S
        if not (model.pre_process or model.post_process):
            return None, None, None
        tokens = Tensor(S.tokens, "tokens", "input") if model.pre_process else None
        labels = Tensor(S.tokens, "labels", "input") if model.post_process else None
        pos = Tensor(S.tokens, "position_ids", "input") if model.pre_process else None
        return tokens, pos, labels

    def param_gather(self):
        _param_gather(self)

    def forward_step(self, c, input_tensor, measure=False):
        m = self.models[c]
        if c in self.param_gather_pending:
            # DDP forward pre-hook (finish_param_sync) with --overlap-param-gather
            self.param_gather_pending.discard(c)
            if c == 0:
                self.param_gather()
        tokens, pos, labels = self.get_batch(m)
        if not m.pre_process:
            m.set_input_tensor(input_tensor)
        del input_tensor
        tape = []
        with ag.tape_scope(tape):
            out = m.forward(tokens, pos, labels, measure)
        del tokens, pos, labels
        if self.args.sim_leak_mib and (self.args.sim_leak_every == "microbatch" or
                                       not self.leaked_this_iter):
            # fault: a user's logging hook keeps a copy of this iteration's (or with
            # --sim-leak-every microbatch, of every microbatch's) activations
            self.leaked_this_iter = True
            self.leaked.append(Tensor(int(self.args.sim_leak_mib * MIB), "logged_activations",
                                      "act"))
        return out, tape

    def backward_step(self, c, tape, grad, last_microbatch):
        a = self.args

        def done(g):
            if last_microbatch and a.overlap_grad_reduce:
                # grad-ready hooks launch the bucket reductions from the worker
                self.grad_sync(c)

        self.engine.backward(tape, grad, done)

    # p2p_communication.P2PCommunicator methods (@nvtx_decorator: the range is
    # emitted on every stage, the transfer only where there is a peer)
    def _first(self, c):
        return self.par.pp_rank == 0 and c == 0

    def _last(self, c):
        return self.par.pp_rank == self.par.pp - 1 and c == len(self.models) - 1

    def _recv_fwd(self, c):
        if self._first(c):
            return None
        t = Tensor(self.S.x, "recv_forward", "act")
        self.dev.collective("ncclRecv", self.S.x, "pp", "bf16", self.par.pp_rank - 1)
        return t

    def _send_fwd(self, c):
        if not self._last(c):
            self.dev.collective("ncclSend", self.S.x, "pp", "bf16", self.par.pp_rank + 1)

    def _recv_bwd(self, c):
        if self._last(c):
            return None
        t = Tensor(self.S.x, "recv_backward", "grad")
        self.dev.collective("ncclRecv", self.S.x, "pp", "bf16", self.par.pp_rank + 1)
        return t

    def _send_bwd(self, c):
        if not self._first(c):
            self.dev.collective("ncclSend", self.S.x, "pp", "bf16", self.par.pp_rank - 1)

    def recv_forward(self, c):
        with nvtx_range(P2P + "recv_forward"):
            return self._recv_fwd(c)

    def send_forward(self, c, out):
        with nvtx_range(P2P + "send_forward"):
            self._send_fwd(c)

    def recv_backward(self, c):
        with nvtx_range(P2P + "recv_backward"):
            return self._recv_bwd(c)

    def send_backward(self, c):
        with nvtx_range(P2P + "send_backward"):
            self._send_bwd(c)

    def send_forward_recv_backward(self, c, out):
        with nvtx_range(P2P + "send_forward_recv_backward"):
            self._send_fwd(c)
            return self._recv_bwd(c)

    def send_backward_recv_forward(self, c):
        with nvtx_range(P2P + "send_backward_recv_forward"):
            self._send_bwd(c)
            return self._recv_fwd(c)

    def use_mb(self, j):
        """--sim-seq-lengths: size what follows for microbatch j of this
        iteration (the run's microbatch it x M + j takes the next length in
        turn). Called before a microbatch's receive, forward and backward; a
        combined send/receive counts the sent bytes at the received
        microbatch's length."""
        L = self.args.sim_seq_list
        if not L:
            return
        s = L[(self.mb_base + j) % len(L)]
        if s not in self.by_length:
            # the model's modules size their tensors from the sequence length at
            # build time: one set of module objects (no parameters: those live in
            # the rank's buffers) per length, built with --seq-length s
            a, keep = self.args, self.args.seq_length
            a.seq_length = s
            try:
                models = [GPTModel(a, [x.layer_number for x in m.decoder.layers],
                                   m.pre_process, m.post_process)
                          for m in self.by_length[keep][0]]
                for m, m0 in zip(models, self.by_length[keep][0]):
                    if m.output is not None:
                        m.output.kept = m0.output.kept    # this step's forward_data_store
                self.by_length[s] = (models, Shapes(a))
            finally:
                a.seq_length = keep
        self.models, self.S = self.by_length[s]

    def get_forward_backward_func(self):
        """schedules.get_forward_backward_func"""
        par = self.par
        if par.pp > 1:
            if par.vp > 1:
                return self.forward_backward_pipelining_with_interleaving
            return self.forward_backward_pipelining_without_interleaving
        return self.forward_backward_no_pipelining

    def forward_backward_no_pipelining(self, M, measure):
        for mb in range(M):
            self.use_mb(mb)
            out, tape = self.forward_step(0, None, measure and mb == 0)
            del out
            self.backward_step(0, tape, None, mb == M - 1)
            del tape

    def forward_backward_pipelining_without_interleaving(self, M, measure):
        """1F1B (schedules.py): PP - stage - 1 warmup forwards, steady 1F1B
        with the combined p2p calls, cooldown backwards."""
        par = self.par
        warmup = min(par.pp - par.pp_rank - 1, M)
        remaining = M - warmup
        inputs, tapes = [], []
        for mb in range(warmup):
            self.use_mb(mb)
            inp = self.recv_forward(0)
            out, tape = self.forward_step(0, inp, measure and mb == 0)
            del inp
            self.send_forward(0, out)
            del out                       # deallocate_output_tensor
            tapes.append(tape)
            del tape
        self.use_mb(warmup)
        inp = self.recv_forward(0) if remaining > 0 else None
        bwd_done = 0
        for i in range(remaining):
            last_iteration = i == remaining - 1
            self.use_mb(warmup + i)
            out, tape = self.forward_step(0, inp, measure and warmup + i == 0)
            del inp
            self.use_mb(bwd_done)
            g = self.send_forward_recv_backward(0, out)
            del out
            tapes.append(tape)
            del tape
            t = tapes.pop(0)
            self.backward_step(0, t, g, bwd_done == M - 1)
            del t, g
            bwd_done += 1
            if last_iteration:
                inp = None
                self.send_backward(0)
            else:
                self.use_mb(warmup + i + 1)
                inp = self.send_backward_recv_forward(0)
        while tapes:
            self.use_mb(bwd_done)
            g = self.recv_backward(0)
            t = tapes.pop(0)
            self.backward_step(0, t, g, bwd_done == M - 1)
            del t, g
            self.send_backward(0)
            bwd_done += 1

    def forward_backward_pipelining_with_interleaving(self, M, measure):
        par = self.par
        vp, pp = par.vp, par.pp
        total = M * vp
        warmup = min((pp - par.pp_rank - 1) * 2 + (vp - 1) * pp, total)
        fwd_count = [0] * vp
        bwd_count = [0] * vp
        pending = [[] for _ in range(vp)]

        def fchunk(k):
            return (k // pp) % vp

        def bchunk(k):
            return vp - 1 - (k // pp) % vp

        def fwd(k):
            c = fchunk(k)
            inp = self.recv_forward(c)
            out, tape = self.forward_step(c, inp, measure and fwd_count[c] == 0)
            del inp
            self.send_forward(c, out)
            del out
            fwd_count[c] += 1
            pending[c].append(tape)

        def bwd(k):
            c = bchunk(k)
            g = self.recv_backward(c)
            t = pending[c].pop(0)
            bwd_count[c] += 1
            self.backward_step(c, t, g, bwd_count[c] == M)
            del t, g
            self.send_backward(c)

        with nvtx_range(SCHED + "warmup"):
            for k in range(warmup):
                fwd(k)
        with nvtx_range(SCHED + "steady"):
            for k in range(total - warmup):
                fwd(k + warmup)
                bwd(k)
        with nvtx_range(SCHED + "cooldown"):
            for k in range(total - warmup, total):
                bwd(k)

    # -------------------------------------------------------- grads, optimizer
    def grad_sync(self, c=None):
        a, dev = self.args, self.dev
        fn = "ncclReduceScatter" if a.use_distributed_optimizer else "ncclAllReduce"
        for i, b in enumerate(self.grad_buffers):
            dev.collective(fn, b.nbytes, "dp" if i == 0 else "edp", "f32")

    def finalize_model_grads(self):
        a, dev, par = self.args, self.dev, self.par
        if not a.overlap_grad_reduce:
            self.grad_sync()
        if a.sequence_parallel:
            dev.collective("ncclAllReduce", 4 * self.S.h, "tp", "f32")   # layernorm grads over TP
        if par.pp > 1 and not a.untie_embeddings_and_output_weights and \
                (par.pp_rank == 0 or par.pp_rank == par.pp - 1):
            dev.collective("ncclAllReduce", 4 * self.S.V * self.S.h // self.S.t, "embd", "f32")

    def optimizer_step(self):
        return DistributedOptimizer(self).step()

    # ------------------------------------------------------------ CUDA graphs
    def capture_cuda_graphs(self, M):
        """cuda_graph_helper.create_cudagraphs() -> TE make_graphed_callables:
        per layer and microbatch a forward and a backward graph in one private
        pool (GraphedLayer). --sim-graph-pool-gib adds that many bytes of
        static saved-for-backward buffers per captured layer and microbatch."""
        from .model import GraphedLayer
        a = self.args
        extra = int(a.sim_graph_pool_gib * GIB) if a.sim_graph_pool_gib else 0
        for m in self.models:
            for layer in m.decoder.layers:
                layer.graphs = None
                graphs = [GraphedLayer(layer, extra) for _ in range(M)]
                layer.graphs = graphs
                layer.graph_calls = 0

    def capture_full_iteration(self, M):
        """--cuda-graph-impl full_iteration (Megatron's FullCudaGraphWrapper):
        forward_backward_func of all microbatches is captured once, after the
        warmup steps, into one private pool that keeps every buffer of it;
        later iterations launch the graph. finalize_model_grads and the
        optimizer stay eager."""
        dev = self.dev
        pool = dev.lib.ms_alloc_pool_begin()
        try:
            dev.lib.ms_graph_capture_begin()
            self.get_forward_backward_func()(M, False)
            exe = dev.lib.ms_graph_capture_end()
        finally:
            dev.lib.ms_alloc_pool_end()
        self.full_graph_pool = pool
        dev.lib.ms_graph_launch(exe)
        return exe

    # ------------------------------------------------------------------ loop
    def train_step(self, it, M):
        """training.py train_step: zero grads, forward_backward_func,
        finalize_model_grads (inside the interleaved schedule's misc range),
        optimizer.step"""
        measure = self.args.sim_print_layer_bytes and it == 0
        self.mb_base = it * M                 # --sim-seq-lengths: the run's microbatch count
        forward_data_store = []           # --sim-keep-outputs: what the loss function returned
        for models, _ in self.by_length.values():
            for m in models:
                if m.output is not None and self.args.sim_keep_outputs:
                    m.output.kept = forward_data_store
        self.get_forward_backward_func()(M, measure)
        self.loaded_resident = None       # --sim-resume-resident-stages: dropped at last
        if self.par.vp > 1:
            with nvtx_range(SCHED + "misc"):
                self.finalize_model_grads()
        else:
            self.finalize_model_grads()
        self.optimizer_step()
        for models, _ in self.by_length.values():
            for m in models:
                if m.output is not None:
                    m.output.kept = None
        del forward_data_store            # train_step returns: the kept outputs go

    def save_checkpoint(self, iteration):
        """save_checkpoint_and_time -> save_checkpoint ([M] in docs/sources.md;
        docs/megasim.md "Checkpoint save"), inside megasim's range
        SAVE_RANGE (Megatron emits no NVTX range of its own for the save).
        The model's and the optimizer's sharded state dicts are views of the
        live tensors; torch_dist stages them to pinned host memory (not
        simulated: no device bytes). With the distributed optimizer and
        --dist-ckpt-optim-fully-reshardable (not mem-efficient),
        get_parameter_state_dp_zero all-gathers each bucket's fp32 param and
        Adam shards over DP with NCCL: per bucket and key, DP receive buffers
        and the sent shard on the device (local = bucket elements / DP, 4
        bytes each), freed before the next key."""
        a, dev, par = self.args, self.dev, self.par
        dev.lib.ms_nvtx_push(SAVE_RANGE.encode())
        try:
            if a.use_distributed_optimizer and a.ckpt_format != "torch" and \
                    a.dist_ckpt_optim_fully_reshardable and \
                    not a.distrib_optim_fully_reshardable_mem_efficient:
                for elems, dp, group in ((self.dense_params, par.dp, "dp"),
                                         (self.expert_params, par.edp, "edp")):
                    for bucket in ddp_buckets(elems, dp, a.overlap_grad_reduce):
                        local = bucket // dp
                        for key in ("param", "exp_avg", "exp_avg_sq"):
                            recv = [Tensor(local * 4, "ckpt_gather_recv." + key, "ckpt")
                                    for _ in range(dp)]
                            send = Tensor(local * 4, "ckpt_gather_send." + key, "ckpt")
                            dev.collective("ncclAllGather", local * 4 * dp, group, "f32")
                            del send, recv           # send = None; recv moved to the host
        finally:
            dev.lib.ms_nvtx_pop()
        self.log(" [Rank %d] saved checkpoint from iteration %8d to %s"
                 % (self.rank, iteration, self.args.save))

    def report_memory(self, it):
        s = self.dev.stats()
        if self.par.dp_rank == 0:
            self.log("[Rank %d] (after %d iterations) memory (MB) | allocated: %.2f | max allocated: "
                     "%.2f | reserved: %.2f | max reserved: %.2f"
                     % (self.rank, it, s.allocated / MIB, s.max_allocated / MIB, s.reserved / MIB,
                        s.max_reserved / MIB))

    def train(self):
        a, par = self.args, self.par
        gbs = a.global_batch_size or a.micro_batch_size * par.dp
        M = gbs // (a.micro_batch_size * par.dp)
        if M < 1 or gbs % (a.micro_batch_size * par.dp):
            raise AssertionError("global batch size (%d) is not divisible by micro batch size (%d) "
                                 "times data parallel size (%d)" % (gbs, a.micro_batch_size, par.dp))
        iters = a.train_iters or 3
        full_graph = None
        profile_here = a.profile and (not a.profile_ranks or self.rank in a.profile_ranks)
        for it in range(iters):
            self.leaked_this_iter = False
            if profile_here and it == a.profile_step_start and a.nvtx_ranges:
                NV.enabled = True            # configure_nvtx_profiling(True)
                NV.drop = tuple(a.sim_drop_nvtx_range)
            if a.cuda_graph_impl in ("transformer_engine", "local") and it == a.cuda_graph_warmup_steps:
                self.capture_cuda_graphs(M)
            if a.cuda_graph_impl == "full_iteration" and it >= a.cuda_graph_warmup_steps:
                if full_graph is None:
                    full_graph = self.capture_full_iteration(M)
                else:
                    self.dev.lib.ms_graph_launch(full_graph)
                self.finalize_model_grads()
                self.optimizer_step()
            else:
                self.train_step(it, M)
            if it >= 1 and a.sim_retain_replay:
                ag.RETAINED[:] = ag.RETAINED[-64:]
            if a.empty_unused_memory_level >= 1:
                self.dev.empty_cache()
            done = it + 1
            self.log(" [Rank %d] iteration %8d/%8d | consumed samples: %12d" %
                     (self.rank, done, iters, done * gbs))
            if done in (1, 2):
                self.report_memory(done)
            if profile_here and done == a.profile_step_end:
                NV.enabled = False
            if a.save and a.save_interval and done % a.save_interval == 0:
                self.save_checkpoint(done)
            if a.exit_interval and done % a.exit_interval == 0:
                self.log("exiting program at iteration %d" % done)    # training.py
                break
        if a.sim_print_layer_bytes:
            for m in self.models:
                for l, kind, b in m.decoder.layer_bytes:
                    print("megasim: rank %d layer %d (%s) saved activation bytes %d"
                          % (self.rank, l, kind, b), flush=True)


def _param_gather(rank):
    for i, b in enumerate(rank.param_buffers):
        rank.dev.collective("ncclAllGather", b.nbytes, "dp" if i == 0 else "edp", "bf16")


class FusedAdam:
    """transformer_engine.pytorch.optimizers.FusedAdam: state created lazily
    (initialize_state) at the first step."""

    def __init__(self, rank):
        self.rank = rank

    def initialize_state(self):
        self.rank.init_optimizer_state()

    def step(self):
        if not self.rank.optimizer_state:
            self.initialize_state()
        te.multi_tensor("nvte_multi_tensor_adam_cuda")


class DistributedOptimizer:
    """MixedPrecisionOptimizer.step -> prepare_grads, clip_grad_norm,
    step_with_ready_grads (inner step, copy main -> model params, param
    all-gather with the distributed optimizer)."""

    def __init__(self, rank):
        self.rank = rank
        self.optimizer = FusedAdam(rank)

    def prepare_grads(self):
        pass                       # main grads are views of the grad buffer

    def clip_grad_norm(self):
        norm = Tensor(4 * 1024, "grad_norm", "optim_tmp")
        te.multi_tensor("nvte_multi_tensor_l2norm_cuda")
        self.rank.dev.collective("ncclAllReduce", 4, "world", "f32")
        del norm

    def step_with_ready_grads(self):
        r = self.rank
        self.optimizer.step()
        te.multi_tensor("nvte_multi_tensor_scale_cuda")   # copy main -> model params
        if r.args.use_distributed_optimizer:
            if r.args.overlap_param_gather:
                # dispatched lazily by the DDP forward pre-hooks of the next iteration
                r.param_gather_pending = set(range(len(r.models)))
                return
            r.param_gather()

    def step(self):
        self.prepare_grads()
        self.clip_grad_norm()
        self.step_with_ready_grads()


def write_counters(r, oom_message=None):
    """The allocator's own view, named like torch.cuda's counters
    (max_memory_allocated, ...), for tools/gpu-validate.sh --dry-run."""
    path = r.args.sim_counters_out
    if not path:
        return
    import json
    s = r.dev.stats()
    out = {"mode": r.dev.mode, "rank": r.rank,
           "max_memory_allocated": s.max_allocated, "max_memory_reserved": s.max_reserved,
           "memory_stats": {"num_alloc_retries": s.num_alloc_retries, "num_ooms": s.num_ooms,
                            "segments": s.segments, "num_cuda_mallocs": s.num_cuda_mallocs}}
    if r.dev.mode in ("nocache", "cudaMallocAsync"):
        # every block is one tensor here: the peak of live tensor bytes
        out["live_tensor_peak_bytes"] = s.max_allocated
    if oom_message is not None:
        out["oom_request_bytes"] = s.oom_request
        out["oom_message"] = oom_message
    with open(path.replace("{rank}", str(r.rank)), "w") as f:
        json.dump(out, f, indent=1)


def colocated_engine_check():
    """vLLM's CuMemAllocator.__init__ (vllm/device_allocator/cumem.py): a memory
    pool with a pluggable allocator cannot coexist with expandable segments
    (pytorch/pytorch issue 147851); the engine refuses to start."""
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    assert "expandable_segments:True" not in conf, (
        "Expandable segments are not compatible with memory pool. Please track "
        "https://github.com/pytorch/pytorch/issues/147851 for the latest updates.")


def pretrain(args):
    r = Rank(args)
    try:
        r.setup()
        if args.sim_fork_worker:
            r.fork_worker()
        r.train()
    except cuda.OutOfMemoryError as e:
        write_counters(r, str(e).splitlines()[0] if str(e) else "out of memory")
        s = r.dev.stats()
        print("megasim: allocator at OOM: rank=%d mode=%s requested=%d allocated=%d reserved=%d "
              "inactive_split=%d inactive_split_blocks=%d largest_free=%d private_pools=%d "
              "segments=%d alloc_retries=%d"
              % (r.rank, r.dev.mode, s.oom_request, s.allocated, s.reserved, s.inactive_split,
                 s.inactive_split_blocks, s.largest_free, r.dev.lib.ms_alloc_pool_reserved(),
                 s.segments, s.num_alloc_retries), file=sys.stderr, flush=True)
        raise
    r.engine.stop()
    write_counters(r)
    return 0


def main(argv):
    from .config import build_parser, finalize, PRESETS
    argv = list(argv)
    if "--sim-preset" in argv:
        i = argv.index("--sim-preset")
        argv = PRESETS[argv[i + 1]] + argv
    args = finalize(build_parser().parse_args(argv))
    return pretrain(args)
