/* test_megasim.c: megasim run as a subprocess under the real shim (against
 * the mock CUDA runtime), its traces read back with recomp-dump.
 *
 *   sizes       per-layer tensor bytes from the trace (tensor mode:
 *               PYTORCH_NO_CUDA_MEMORY_CACHING=1, one cudaMalloc per tensor)
 *               equal the worked examples ([P] in docs/sources.md)
 *   recompute   each label's replay pattern on the pt_autograd_0 thread
 *   oom         the default main job OOMs on stage 0 (iteration 2, forward),
 *               PyTorch's message, non-zero exit, trace intact; fits with mlp
 *   validation  Megatron's config errors ([M] in docs/sources.md)
 *   fragmentation  R09-like: inactive split >= 10x the failed request
 *   faults      resume, NCCL buffers, another process, CUDA-graph pools
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef MS_SHIM
#error "MS_SHIM, MS_DUMP, MS_LIBDIR, MS_PYDIR, MS_PYTHON come from meson"
#endif

#define GIB (1ull << 30)
#define MIB (1ull << 20)

typedef struct run {
    char dir[256];       /* temp dir: out/ + stderr */
    int status;          /* exit code, or 128+signal */
    char *err;           /* stderr text */
    char **dumps;        /* recomp-dump text per trace (sorted by file name) */
    char **names;
    int ntraces;
} run;

static char *
slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return strdup("");
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    size_t k;
    while ((k = fread(b + n, 1, cap - n - 1, f)) > 0) {
        n += k;
        if (cap - n < 4096) {
            cap *= 2;
            b = realloc(b, cap);
        }
    }
    b[n] = 0;
    fclose(f);
    return b;
}

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *
dump_trace(const char *path)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' '%s' 2>/dev/null", MS_DUMP, path);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    size_t cap = 1 << 20, n = 0, k;
    char *b = malloc(cap);
    while ((k = fread(b + n, 1, cap - n - 1, p)) > 0) {
        n += k;
        if (cap - n < 65536) {
            cap *= 2;
            b = realloc(b, cap);
        }
    }
    b[n] = 0;
    int rc = pclose(p);
    cr_assert_eq(rc, 0, "recomp-dump %s failed", path);
    return b;
}

static void
collect(run *r, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st))
            continue;
        if (S_ISDIR(st.st_mode)) {
            collect(r, p);
        } else if (strstr(e->d_name, ".rstrace")) {
            r->names = realloc(r->names, sizeof(char *) * (r->ntraces + 1));
            r->names[r->ntraces++] = strdup(p);
        }
    }
    closedir(d);
}

/* Runs python3 -m megasim ARGS... (NULL-terminated) under the shim with the
 * extra environment `env` ("K=V;K=V" or NULL). */
static void
megasim(run *r, const char *env, ...)
{
    memset(r, 0, sizeof *r);
    snprintf(r->dir, sizeof r->dir, "/tmp/megasim-test.XXXXXX");
    cr_assert(mkdtemp(r->dir));
    char out[300], errp[300];
    snprintf(out, sizeof out, "%s/out", r->dir);
    snprintf(errp, sizeof errp, "%s/stderr", r->dir);
    mkdir(out, 0700);
    const char *argv[64];
    int n = 0;
    argv[n++] = MS_PYTHON;
    argv[n++] = "-m";
    argv[n++] = "megasim";
    va_list ap;
    va_start(ap, env);
    const char *a;
    while ((a = va_arg(ap, const char *)) && n < 60)
        argv[n++] = a;
    va_end(ap);
    argv[n++] = "--sim-quiet";
    argv[n] = NULL;
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int fd = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 2);
        int nul = open("/dev/null", O_WRONLY);
        dup2(nul, 1);
        /* The sanitizer tier (tools/sanitize.sh): its runtime first. */
        const char *rt = getenv("RS_SANITIZER_RUNTIME");
        char pre[1024];
        snprintf(pre, sizeof pre, "%s%s%s", rt && *rt ? rt : "", rt && *rt ? " " : "", MS_SHIM);
        setenv("LD_PRELOAD", pre, 1);
        setenv("RECOMPSHIM_OUT", out, 1);
        setenv("MEGASIM_LIB_DIR", MS_LIBDIR, 1);
        setenv("PYTHONPATH", MS_PYDIR, 1);
        unsetenv("PYTORCH_CUDA_ALLOC_CONF");
        unsetenv("PYTORCH_NO_CUDA_MEMORY_CACHING");
        unsetenv("NVTX_INJECTION64_PATH");
        if (env) {
            char *copy = strdup(env), *save = NULL;
            for (char *t = strtok_r(copy, ";", &save); t; t = strtok_r(NULL, ";", &save)) {
                char *eq = strchr(t, '=');
                *eq = 0;
                setenv(t, eq + 1, 1);
            }
        }
        execv(MS_PYTHON, (char *const *)argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    r->err = slurp(errp);
    collect(r, out);
    if (r->ntraces > 1)
        qsort(r->names, r->ntraces, sizeof(char *), cmp_str);
    r->dumps = calloc(r->ntraces + 1, sizeof(char *));
    for (int i = 0; i < r->ntraces; i++)
        r->dumps[i] = dump_trace(r->names[i]);
}

static int
rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

static void
run_free(run *r)
{
    nftw(r->dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    for (int i = 0; i < r->ntraces; i++) {
        free(r->dumps[i]);
        free(r->names[i]);
    }
    free(r->dumps);
    free(r->names);
    free(r->err);
}

/* the trace of `rank` (file names start with rank<R>-) */
static const char *
trace_of(run *r, int rank)
{
    char pre[32];
    snprintf(pre, sizeof pre, "/rank%d-", rank);
    for (int i = 0; i < r->ntraces; i++)
        if (strstr(r->names[i], pre))
            return r->dumps[i];
    cr_assert_fail("no trace for rank %d (%d traces); stderr:\n%s", rank, r->ntraces, r->err);
    return NULL;
}

/* strstr bounded to the line starting at l */
static const char *
line_has(const char *l, const char *s)
{
    const char *eol = strchr(l, '\n');
    const char *m = strstr(l, s);
    return m && (!eol || m < eol) ? m : NULL;
}

static const char *
field(const char *line, const char *key, char *buf, size_t n)
{
    /* value of " key=" in one line (quoted values without quotes) */
    char k[64];
    snprintf(k, sizeof k, " %s=", key);
    const char *eol = strchr(line, '\n');
    const char *p = strstr(line, k);
    if (!p || (eol && p > eol))
        return NULL;
    p += strlen(k);
    size_t i = 0;
    if (*p == '"') {
        p++;
        while (*p && *p != '"' && i + 1 < n)
            buf[i++] = *p++;
    } else {
        while (*p && *p != ' ' && *p != '\n' && i + 1 < n)
            buf[i++] = *p++;
    }
    buf[i] = 0;
    return buf;
}

static long
tid_of_thread(const char *dump, const char *name)
{
    char q[128], b[64];
    snprintf(q, sizeof q, "name=\"%s\"", name);
    for (const char *l = dump; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (!strncmp(l, "THREAD ", 7)) {
            const char *eol = strchr(l, '\n');
            const char *m = strstr(l, q);
            if (m && (!eol || m < eol))
                return atol(field(l, "thread_tid", b, sizeof b));
        }
    }
    return -1;
}

/* counts NVTX_PUSH lines whose name contains `name` on thread `tid` (-1: any) */
static int
count_push(const char *dump, long tid, const char *name)
{
    int n = 0;
    char b[512];
    for (const char *l = dump; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, "NVTX_PUSH ", 10))
            continue;
        if (tid >= 0 && atol(field(l, "tid", b, sizeof b)) != tid)
            continue;
        if (field(l, "name", b, sizeof b) && strstr(b, name))
            n++;
    }
    return n;
}

static int
count_lines(const char *dump, const char *prefix)
{
    int n = 0;
    for (const char *l = dump; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, prefix, strlen(prefix)))
            n++;
    return n;
}

/* ---------------------------------------------------------------- sizes */

/* Live device bytes (tensor mode: each ALLOC is one tensor) at each
 * main-thread NVTX push whose name ends with `suffix`, in order. */
static int
live_at_pushes(const char *dump, const char *suffix, uint64_t *out, int max)
{
    typedef struct { uint64_t p, s; } ent;
    size_t cap = 1 << 16, n = 0;
    ent *map = calloc(cap, sizeof *map);
    uint64_t live = 0;
    int k = 0;
    char b[512];
    long main_tid = -1;
    for (const char *l = dump; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (!strncmp(l, "ALLOC ", 6)) {
            if (!line_has(l, "mem=device"))
                continue;
            uint64_t p = strtoull(field(l, "ptr", b, sizeof b), NULL, 16);
            uint64_t s = strtoull(field(l, "size", b, sizeof b), NULL, 10);
            if (n == cap) {
                cap *= 2;
                map = realloc(map, cap * sizeof *map);
            }
            map[n].p = p;
            map[n++].s = s;
            live += s;
        } else if (!strncmp(l, "FREE ", 5)) {
            uint64_t p = strtoull(field(l, "ptr", b, sizeof b), NULL, 16);
            for (size_t i = n; i-- > 0;)
                if (map[i].p == p && map[i].s) {
                    live -= map[i].s;
                    map[i].s = 0;
                    break;
                }
        } else if (!strncmp(l, "NVTX_PUSH ", 10)) {
            long tid = atol(field(l, "tid", b, sizeof b));
            if (main_tid < 0)
                main_tid = tid;
            if (tid != main_tid || !field(l, "name", b, sizeof b))
                continue;
            size_t bl = strlen(b), sl = strlen(suffix);
            if (bl >= sl && !strcmp(b + bl - sl, suffix) && k < max)
                out[k++] = live;
        }
    }
    free(map);
    return k;
}

Test(sizes, llama3_8b_layer_bytes_in_trace, .timeout = 120)
{
    run r;
    megasim(&r, "PYTORCH_NO_CUDA_MEMORY_CACHING=1", "--sim-preset", "llama3-8b",
            "--num-layers", "4", "--train-iters", "1", "--profile", "--nvtx-ranges",
            "--profile-step-start", "0", NULL);
    cr_assert_eq(r.status, 0, "megasim failed:\n%s", r.err);
    cr_assert_eq(r.ntraces, 1);
    const char *d = trace_of(&r, 0);
    uint64_t at[16];
    int k = live_at_pushes(d, "._forward_attention.self_attention", at, 16);
    cr_assert_geq(k, 4, "%d layer pushes", k);
    /* layers 1..3 (layer 0 also creates TE's cuBLAS workspace) */
    for (int i = 1; i + 1 < 4; i++)
        cr_expect_eq(at[i + 1] - at[i], 1141899264ull, "layer %d: %llu bytes", i,
                     (unsigned long long)(at[i + 1] - at[i]));
    run_free(&r);
}

Test(sizes, moonlight_moe_mla_layer_bytes_in_trace, .timeout = 120)
{
    run r;
    megasim(&r, "PYTORCH_NO_CUDA_MEMORY_CACHING=1", "--sim-preset", "moonlight-16b",
            "--num-layers", "5", "--moe-layer-freq", "([0]+[1]*4)", "--sim-world-size", "8",
            "--sim-only-ranks", "0", "--train-iters", "1", "--profile", "--nvtx-ranges",
            "--profile-step-start", "0", NULL);
    cr_assert_eq(r.status, 0, "megasim failed:\n%s", r.err);
    const char *d = trace_of(&r, 0);
    uint64_t at[16];
    int k = live_at_pushes(d, "._forward_attention.self_attention", at, 16);
    cr_assert_geq(k, 5);
    for (int i = 1; i + 1 < 5; i++)      /* MoE layers 1..4 */
        cr_expect_eq(at[i + 1] - at[i], 278183936ull, "layer %d: %llu bytes", i,
                     (unsigned long long)(at[i + 1] - at[i]));
    run_free(&r);
}

/* ------------------------------------------------------------ recompute */

typedef struct replay_case {
    const char *name;
    const char *preset;
    const char *args[8];
    const char *forward_name;   /* a forward-only range that the replay re-emits */
    int per_layer;              /* expected count per replayed layer and microbatch */
} replay_case;

static void
replay_check(const replay_case *c, int layers, int nmoe)
{
    const char *base[] = { "--sim-preset", c->preset, "--num-layers", NULL, "--train-iters", "1",
                           "--profile", "--nvtx-ranges", "--profile-step-start", "0",
                           "--global-batch-size", "2" };
    if (strstr(c->preset, "moonlight"))
        base[11] = "8";          /* DP 4 (8 ranks, TP 2): 2 microbatches */
    char nl[8];
    snprintf(nl, sizeof nl, "%d", layers);
    base[3] = nl;
    (void)nmoe;
    run with, without;
    const char *moe = strstr(c->preset, "moonlight") ? "([0]+[1]*2)" : "1";
    if (strstr(c->preset, "moonlight")) {
        megasim(&without, NULL, base[0], base[1], base[2], base[3], base[4], base[5], base[6],
                base[7], base[8], base[9], base[10], base[11], "--moe-layer-freq", moe,
                "--sim-world-size", "8", "--sim-only-ranks", "0", NULL);
        megasim(&with, NULL, base[0], base[1], base[2], base[3], base[4], base[5], base[6],
                base[7], base[8], base[9], base[10], base[11], "--moe-layer-freq", moe,
                "--sim-world-size", "8", "--sim-only-ranks", "0",
                c->args[0], c->args[1], c->args[2], c->args[3], c->args[4], c->args[5], NULL);
    } else {
        megasim(&without, NULL, base[0], base[1], base[2], base[3], base[4], base[5], base[6],
                base[7], base[8], base[9], base[10], base[11], NULL);
        megasim(&with, NULL, base[0], base[1], base[2], base[3], base[4], base[5], base[6],
                base[7], base[8], base[9], base[10], base[11],
                c->args[0], c->args[1], c->args[2], c->args[3], c->args[4], c->args[5], NULL);
    }
    cr_assert_eq(without.status, 0, "%s baseline:\n%s", c->name, without.err);
    cr_assert_eq(with.status, 0, "%s:\n%s", c->name, with.err);
    const char *dw = trace_of(&with, 0), *dn = trace_of(&without, 0);
    long aw = tid_of_thread(dw, "pt_autograd_0"), an = tid_of_thread(dn, "pt_autograd_0");
    cr_assert(aw > 0 && an > 0, "no pt_autograd_0 thread");
    int nw = count_push(dw, aw, c->forward_name), nn = count_push(dn, an, c->forward_name);
    cr_expect_eq(nn, 0, "%s: baseline has %d '%s' on pt_autograd_0", c->name, nn, c->forward_name);
    cr_expect_eq(nw, c->per_layer, "%s: %d '%s' on pt_autograd_0, want %d", c->name, nw,
                 c->forward_name, c->per_layer);
    /* the forward itself stays on the main thread */
    cr_expect_gt(count_push(dw, -1, c->forward_name), nw, "%s: forward copy missing", c->name);
    run_free(&with);
    run_free(&without);
}

/* 2 microbatches; dense Llama: 3 layers; Moonlight: 1 dense + 2 MoE layers */
Test(recompute, core_attn_replays_fused_attention_on_autograd_thread, .timeout = 120)
{
    replay_case c = { "core_attn", "llama3-8b",
                      { "--recompute-granularity", "selective", "--recompute-modules", "core_attn",
                        "--sim-quiet", "--sim-quiet" },
                      "nvte_flash_attn_fwd", 2 * 3 * 2 };   /* 2 calls x 3 layers x 2 mb */
    replay_check(&c, 3, 0);
}

Test(recompute, mlp_replays_mlp_forward_ranges, .timeout = 120)
{
    replay_case c = { "mlp", "llama3-8b",
                      { "--recompute-granularity", "selective", "--recompute-modules", "mlp",
                        "--sim-quiet", "--sim-quiet" },
                      "megatron.core.transformer.mlp.forward.linear_fc1", 3 * 2 };
    replay_check(&c, 3, 0);
}

Test(recompute, full_uniform_replays_whole_layers, .timeout = 120)
{
    replay_case c = { "full uniform 1", "llama3-8b",
                      { "--recompute-granularity", "full", "--recompute-method", "uniform",
                        "--recompute-num-layers", "1" },
                      "._forward_attention.self_attention", 3 * 2 };
    replay_check(&c, 3, 0);
}

Test(recompute, full_block_replays_first_n_layers, .timeout = 120)
{
    replay_case c = { "full block 2", "llama3-8b",
                      { "--recompute-granularity", "full", "--recompute-method", "block",
                        "--recompute-num-layers", "2" },
                      "._forward_attention.self_attention", 2 * 2 };
    replay_check(&c, 3, 0);
}

Test(recompute, layernorm_recomputes_norms_at_hook, .timeout = 120)
{
    /* Moonlight: MLA input LN on 3 layers + MoE pre-MLP LN on 2 layers; each
     * TENorm replay = 2 nvte_rmsnorm_fwd calls (query + launch) */
    replay_case c = { "layernorm", "moonlight-16b",
                      { "--recompute-granularity", "selective", "--recompute-modules", "layernorm",
                        "--sim-quiet", "--sim-quiet" },
                      "nvte_rmsnorm_fwd", (3 + 2) * 2 * 2 };
    replay_check(&c, 3, 2);
}

/* MLA's RoPE makes no TE call (Megatron's own Triton kernels when fused):
 * the replay shows as the norms fused into linear_q_proj and
 * linear_kv_up_proj, 2 nvte_rmsnorm_fwd calls each (query + launch) */
Test(recompute, mla_up_proj_recomputes_norm_linears_at_hook, .timeout = 120)
{
    replay_case c = { "mla_up_proj", "moonlight-16b",
                      { "--recompute-granularity", "selective", "--recompute-modules", "mla_up_proj",
                        "--sim-quiet", "--sim-quiet" },
                      "nvte_rmsnorm_fwd", 2 * 2 * 3 * 2 };   /* 2 norms, 3 layers, 2 mb */
    replay_check(&c, 3, 2);
}

Test(recompute, moe_replays_shared_experts_and_all_to_all, .timeout = 120)
{
    replay_case c = { "moe", "moonlight-16b",
                      { "--recompute-granularity", "selective", "--recompute-modules", "moe",
                        "--sim-quiet", "--sim-quiet" },
                      "megatron.core.transformer.mlp.forward.linear_fc1", 2 * 2 };
    replay_check(&c, 3, 2);
}

Test(recompute, shared_experts_replays_shared_mlp, .timeout = 120)
{
    replay_case c = { "shared_experts", "moonlight-16b",
                      { "--recompute-granularity", "selective", "--recompute-modules",
                        "shared_experts", "--sim-quiet", "--sim-quiet" },
                      "megatron.core.transformer.mlp.forward.linear_fc1", 2 * 2 };
    replay_check(&c, 3, 2);
}

Test(recompute, moe_act_reallocates_activation_on_autograd_thread, .timeout = 120)
{
    /* the activation has no range of its own: count its allocations (tensor
     * mode) of 2*N_r*f_e = 34603008 bytes on pt_autograd_0 */
    const char *common[] = { "--sim-preset", "moonlight-16b", "--num-layers", "3",
                             "--moe-layer-freq", "([0]+[1]*2)", "--sim-world-size", "8",
                             "--sim-only-ranks", "0", "--train-iters", "1",
                             "--global-batch-size", "8" };
    run w, n;
#define C common[0], common[1], common[2], common[3], common[4], common[5], common[6], \
          common[7], common[8], common[9], common[10], common[11], common[12], common[13]
    megasim(&n, "PYTORCH_NO_CUDA_MEMORY_CACHING=1", C, NULL);
    megasim(&w, "PYTORCH_NO_CUDA_MEMORY_CACHING=1", C, "--recompute-granularity", "selective",
            "--recompute-modules", "moe_act", NULL);
#undef C
    cr_assert_eq(n.status, 0, "%s", n.err);
    cr_assert_eq(w.status, 0, "%s", w.err);
    int cnt[2];
    run *rs[2] = { &n, &w };
    for (int i = 0; i < 2; i++) {
        const char *d = trace_of(rs[i], 0);
        long ag = tid_of_thread(d, "pt_autograd_0");
        char b[64], tb[64];
        cnt[i] = 0;
        for (const char *l = d; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
            if (!strncmp(l, "ALLOC ", 6) && atol(field(l, "tid", tb, sizeof tb)) == ag &&
                !strcmp(field(l, "size", b, sizeof b), "34603008"))
                cnt[i]++;
    }
    cr_expect_eq(cnt[1] - cnt[0], 2 * 2, "moe_act replays: %d with, %d without", cnt[1], cnt[0]);
    run_free(&n);
    run_free(&w);
}

Test(recompute, backward_runs_on_pt_autograd_forward_on_main, .timeout = 120)
{
    run r;
    megasim(&r, NULL, "--sim-preset", "llama3-8b", "--num-layers", "2", "--train-iters", "1",
            "--profile", "--nvtx-ranges", "--profile-step-start", "0", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    const char *d = trace_of(&r, 0);
    long ag = tid_of_thread(d, "pt_autograd_0");
    cr_assert_gt(ag, 0);
    cr_expect_gt(count_push(d, ag, "nvte_flash_attn_bwd"), 0);
    cr_expect_eq(count_push(d, ag, "._forward_attention.self_attention"), 0);
    cr_expect_gt(count_push(d, -1, "._forward_attention.self_attention"), 0);
    cr_expect_eq(count_push(d, ag, "nvte_multi_tensor_adam_cuda"), 0);
    cr_expect_eq(count_push(d, -1, "nvte_multi_tensor_adam_cuda"), 1);
    run_free(&r);
}

Test(recompute, te_python_ranges_only_with_nvte_nvtx_enabled, .timeout = 60)
{
    run on, off;
    megasim(&on, "NVTE_NVTX_ENABLED=1", "--sim-preset", "llama3-8b", "--num-layers", "2",
            "--train-iters", "1", NULL);
    megasim(&off, NULL, "--sim-preset", "llama3-8b", "--num-layers", "2", "--train-iters", "1",
            NULL);
    cr_assert_eq(on.status, 0, "%s", on.err);
    const char *d = trace_of(&on, 0);
    long ag = tid_of_thread(d, "pt_autograd_0");
    cr_expect_eq(count_push(d, -1, "TELayerNormColumnParallelLinear forward"), 2 * 2);
    cr_expect_eq(count_push(d, ag, "_LayerNormLinear_backward"), 2 * 2);
    cr_expect_eq(count_push(d, ag, "transformer_engine.FusedAttnFunc.backward"), 2);
    /* TE's C API ranges nest inside the Python ones */
    cr_expect_gt(count_push(d, -1, "nvte_rmsnorm_fwd"), 0);
    const char *doff = trace_of(&off, 0);
    cr_expect_eq(count_push(doff, -1, "TELayerNormColumnParallelLinear forward"), 0);
    cr_expect_eq(count_push(doff, -1, "_LayerNormLinear_backward"), 0);
    run_free(&on);
    run_free(&off);
}

/* ------------------------------------------------------------------ oom */

#define MAIN_JOB "--sim-preset", "llama3-8b", "--pipeline-model-parallel-size", "2", \
    "--sim-world-size", "4", "--use-distributed-optimizer", "--global-batch-size", "8", \
    "--train-iters", "3", "--profile", "--nvtx-ranges", "--profile-step-start", "0", \
    "--profile-step-end", "3"

Test(oom, main_job_ooms_on_stage0_in_iteration2_forward, .timeout = 120)
{
    run r;
    megasim(&r, NULL, MAIN_JOB, NULL);
    cr_expect_neq(r.status, 0);
    cr_assert_eq(r.ntraces, 4, "%d traces\n%s", r.ntraces, r.err);
    cr_expect(strstr(r.err, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "),
              "no PyTorch OOM message:\n%s", r.err);
    cr_expect(strstr(r.err, "rank: 0 (local_rank: 0) exitcode: 1"));
    for (int rank = 0; rank < 4; rank++) {
        const char *d = trace_of(&r, rank);
        int ooms = count_lines(d, "OOM ");
        if (rank < 2) {
            cr_expect_gt(ooms, 0, "rank %d: no OOM record", rank);
            /* after the first optimizer step (Adam state), in a forward range */
            const char *adam = strstr(d, "name=\"nvte_multi_tensor_adam_cuda\"");
            const char *oom = strstr(d, "\nOOM ");
            cr_expect(adam && oom && adam < oom, "rank %d: OOM before the first optimizer step", rank);
            cr_expect(strstr(d, "closed=yes"), "rank %d: trace not closed cleanly", rank);
        } else {
            cr_expect_eq(ooms, 0, "rank %d (stage 1) has an OOM", rank);
        }
    }
    run_free(&r);
}

Test(oom, main_job_fits_with_selective_mlp, .timeout = 120)
{
    run r;
    megasim(&r, NULL, MAIN_JOB, "--recompute-granularity", "selective", "--recompute-modules",
            "mlp", NULL);
    cr_expect_eq(r.status, 0, "%s", r.err);
    for (int rank = 0; rank < r.ntraces; rank++)
        cr_expect_eq(count_lines(r.dumps[rank], "OOM "), 0);
    run_free(&r);
}

Test(oom, core_attn_does_not_help, .timeout = 120)
{
    run r;
    megasim(&r, NULL, MAIN_JOB, "--recompute-activations", NULL);
    cr_expect_neq(r.status, 0);
    cr_expect(strstr(r.err, "CUDA out of memory"));
    run_free(&r);
}

Test(oom, optimizer_state_init_r06_like, .timeout = 120)
{
    /* no distributed optimizer, capacity 60 GiB: the first optimizer step's
     * Adam moments do not fit (the activations are gone by then) */
    run r;
    megasim(&r, NULL, "--sim-preset", "llama3-8b", "--num-layers", "16", "--train-iters", "2",
            "--sim-capacity-gib", "60", "--seq-length", "2048", NULL);
    cr_expect_neq(r.status, 0);
    const char *d = trace_of(&r, 0);
    const char *bwd = strstr(d, "name=\"nvte_flash_attn_bwd\"");
    const char *oom = strstr(d, "\nOOM ");
    cr_expect(bwd && oom && bwd < oom, "OOM not after backward");
    cr_expect_eq(count_push(d, -1, "nvte_multi_tensor_adam_cuda"), 0, "the step ran");
    run_free(&r);
}

/* ----------------------------------------------------------- validation */

Test(validation, megatron_config_errors, .timeout = 60)
{
    struct { const char *a[10]; const char *msg; } cases[] = {
        { { "--recompute-granularity", "selective", "--recompute-modules", "moe_act", NULL },
          "moe_act in recompute_modules is only supported with moe_grouped_gemm." },
        { { "--recompute-granularity", "selective", "--recompute-modules", "mla_up_proj", NULL },
          "mla_up_proj in recompute_modules is only supported with multi_latent_attention." },
        { { "--recompute-granularity", "full", "--recompute-method", "uniform", NULL },
          "When using recompute_granularity: full recompute_num_layers must be between 1 and "
          "num_layers_per_pipeline_rank: 32" },
        { { "--recompute-granularity", "full", "--recompute-num-layers", "1", NULL },
          "Using recompute_granularity: full so recompute_method must be \"block\" or \"uniform\"" },
        { { "--recompute-granularity", "selective", "--recompute-modules", "bogus", NULL },
          "Invalid choices for recompute_modules: {'bogus'}" },
        { { "--recompute-granularity", "full", "--recompute-method", "block",
            "--recompute-num-layers", "1", "--cuda-graph-impl", "transformer_engine" },
          "full recompute is only supported with full iteration CUDA graph." },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run r;
        megasim(&r, NULL, "--sim-preset", "llama3-8b", cases[i].a[0], cases[i].a[1], cases[i].a[2],
                cases[i].a[3], cases[i].a[4], cases[i].a[5], cases[i].a[6], cases[i].a[7],
                cases[i].a[8], NULL);
        cr_expect_neq(r.status, 0, "case %zu accepted", i);
        cr_expect(strstr(r.err, cases[i].msg), "case %zu: want '%s' in:\n%s", i, cases[i].msg, r.err);
        cr_expect_eq(r.ntraces, 0, "case %zu: a trace (CUDA was touched)", i);
        run_free(&r);
    }
}

/* -------------------------------------------------------- fragmentation */

/* R09-like: variably sized FP8 cast/transpose buffers (96..300 MiB) between
 * saved activations, stage 0 of a PP=2 Llama-3 8B-like job (24 layers) on a
 * 64 GiB device. Native allocator: OOM although allocated + request fits,
 * with an inactive split >= 10x the request; expandable segments: fits. */
#define R09 "--sim-preset", "llama3-8b", "--num-layers", "24", "--pipeline-model-parallel-size", \
    "2", "--sim-world-size", "4", "--sim-only-ranks", "0", "--use-distributed-optimizer", \
    "--global-batch-size", "8", "--train-iters", "3", "--sim-fragment", "--sim-fragment-max-mib", \
    "300", "--sim-capacity-gib", "64"

Test(fragmentation, r09_like_inactive_split_10x_request, .timeout = 120)
{
    run r;
    megasim(&r, NULL, R09, NULL);
    cr_assert_neq(r.status, 0, "no OOM");
    const char *line = strstr(r.err, "megasim: allocator at OOM:");
    cr_assert(line, "%s", r.err);
    char b[64];
    uint64_t req = strtoull(field(line, "requested", b, sizeof b), NULL, 10);
    uint64_t split = strtoull(field(line, "inactive_split", b, sizeof b), NULL, 10);
    uint64_t alloc = strtoull(field(line, "allocated", b, sizeof b), NULL, 10);
    cr_expect_geq(split, 10 * req, "inactive split %llu < 10 x request %llu",
                  (unsigned long long)split, (unsigned long long)req);
    cr_expect_lt(alloc + req, 64 * GIB, "allocated + request does not fit the capacity");
    const char *d = trace_of(&r, 0);
    cr_expect_gt(count_lines(d, "OOM "), 0);
    /* the allocator retried after releasing its (unsplit) cache */
    cr_expect(strstr(line, "alloc_retries=") && atoi(strstr(line, "alloc_retries=") + 14) >= 1);
    run_free(&r);
}

Test(fragmentation, r09_like_fits_with_expandable_segments, .timeout = 120)
{
    run r;
    megasim(&r, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", R09, NULL);
    cr_expect_eq(r.status, 0, "%s", r.err);
    const char *d = trace_of(&r, 0);
    cr_expect_eq(count_lines(d, "OOM "), 0);
    /* PyTorch memory comes from the driver VMM calls, none from cudaMalloc */
    cr_expect_gt(count_lines(d, "VMM_CREATE "), 0);
    cr_expect_gt(count_lines(d, "VMM_MAP "), 0);
    cr_expect_eq(count_lines(d, "ALLOC "), 0);
    run_free(&r);
}

/* Expandable segments reach the whole device (hplay5 case 3a): the driver
 * double's mapping table held 4096 pages of 20 MiB, so every device under
 * expandable_segments:True ran out near 80 GiB whatever its capacity; on a
 * 120 GiB device the llama3-8b job now fills it: its OOM comes with more
 * than 110 GiB reserved, less than the request free. */
Test(fragmentation, expandable_segments_reach_the_capacity, .timeout = 120)
{
    run r;
    megasim(&r, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "--sim-preset", "llama3-8b",
            "--sim-world-size", "1", "--global-batch-size", "2", "--train-iters", "2",
            "--sim-capacity-gib", "120", NULL);
    cr_assert_neq(r.status, 0, "no OOM");
    const char *line = strstr(r.err, "megasim: allocator at OOM:");
    cr_assert(line, "%s", r.err);
    char b[64];
    uint64_t req = strtoull(field(line, "requested", b, sizeof b), NULL, 10);
    uint64_t res = strtoull(field(line, "reserved", b, sizeof b), NULL, 10);
    cr_expect_gt(res, 110 * GIB, "reserved %llu at the OOM: capped below the 120 GiB device",
                 (unsigned long long)res);
    cr_expect_gt(res + req, 120 * GIB - 2 * GIB, "the request would have fit the device");
    cr_expect_null(strstr(r.err, "entries of a table are in use"), "%s", r.err);
    run_free(&r);
}

/* Expandable segments unmap the whole pages of every free block before an
 * OOM, not only the free end of the segment (PyTorch's release_blocks calls
 * unmap_block on each free block of an expandable segment; hplay6: megasim
 * held 9.37 GiB reserved but unallocated at such an OOM, real PyTorch
 * would have unmapped it). Stage 1 of a resume on 21 GiB: the loaded
 * state's freed copy lies between live blocks; at the OOM no free block
 * holds a whole 20 MiB page (before: one 653 MiB free block). */
Test(fragmentation, expandable_segments_unmap_every_free_page_on_oom, .timeout = 120)
{
    run r;
    megasim(&r, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "--sim-preset", "llama3-8b",
            "--num-layers", "8", "--pipeline-model-parallel-size", "2", "--sim-world-size", "4",
            "--sim-only-ranks", "2", "--use-distributed-optimizer", "--global-batch-size", "8",
            "--seq-length", "4096", "--max-position-embeddings", "8192", "--train-iters", "3",
            "--sim-resume-optimizer", "--sim-capacity-gib", "21", NULL);
    cr_assert_neq(r.status, 0, "no OOM");
    const char *line = strstr(r.err, "megasim: allocator at OOM:");
    cr_assert(line, "%s", r.err);
    char b[64];
    uint64_t res = strtoull(field(line, "reserved", b, sizeof b), NULL, 10);
    uint64_t alloc = strtoull(field(line, "allocated", b, sizeof b), NULL, 10);
    uint64_t largest = strtoull(field(line, "largest_free", b, sizeof b), NULL, 10);
    uint64_t nfree = strtoull(field(line, "inactive_split_blocks", b, sizeof b), NULL, 10);
    cr_expect_lt(largest, 20 * MIB, "a free block of %llu bytes kept a whole page mapped",
                 (unsigned long long)largest);
    /* each free block keeps at most its two partial pages */
    cr_expect_leq(res - alloc, (nfree + 1) * 2 * 20 * MIB, "reserved %llu - allocated %llu",
                  (unsigned long long)res, (unsigned long long)alloc);
    run_free(&r);
}

/* --------------------------------------------------------------- faults */

Test(faults, resume_allocates_optimizer_state_before_first_forward, .timeout = 60)
{
    run r;
    megasim(&r, "PYTORCH_NO_CUDA_MEMORY_CACHING=1", "--sim-preset", "llama3-8b", "--num-layers",
            "2", "--train-iters", "1", "--sim-resume-optimizer", "--profile", "--nvtx-ranges",
            "--profile-step-start", "0", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    const char *d = trace_of(&r, 0);
    /* main params (layer0: 218 M params x 4 B) are followed by the loaded
     * duplicate (x2) and two moments of the same size, all before the
     * embedding's range */
    const char *emb = strstr(d, "language_model_embedding.forward");
    cr_assert(emb);
    int allocs_before = 0;
    for (const char *l = d; l && l < emb; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, "ALLOC ", 6))
            allocs_before++;
    run n;
    megasim(&n, "PYTORCH_NO_CUDA_MEMORY_CACHING=1", "--sim-preset", "llama3-8b", "--num-layers",
            "2", "--train-iters", "1", "--profile", "--nvtx-ranges", "--profile-step-start", "0",
            NULL);
    const char *dn = trace_of(&n, 0);
    const char *embn = strstr(dn, "language_model_embedding.forward");
    int allocs_before_n = 0;
    for (const char *l = dn; l && l < embn; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, "ALLOC ", 6))
            allocs_before_n++;
    /* 4 main-param tensors: +4 loaded duplicates, +8 moments */
    cr_expect_eq(allocs_before - allocs_before_n, 12, "%d vs %d", allocs_before, allocs_before_n);
    run_free(&r);
    run_free(&n);
}

Test(faults, nccl_buffers_outside_pytorch_grow_with_communicators, .timeout = 60)
{
    run r;
    megasim(&r, NULL, "--sim-preset", "llama3-8b", "--num-layers", "2", "--train-iters", "2",
            "--sim-nccl-buffers-mib", "256", "--sim-nccl-communicators", "3", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    const char *d = trace_of(&r, 0);
    /* world, tp, pp, dp + 3 extra communicators, each with its buffers at
     * init; more when a communicator first connects (dp: grad sync, world:
     * grad norm). Outside PyTorch: made by the NCCL module (cuMem* through
     * cuGetProcAddress with the driver double, else cudaMalloc). */
    int inits = count_push(d, -1, "ncclCommInitRank");
    cr_expect_eq(inits, 7);
    int n = 0;
    for (const char *l = d; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if ((!strncmp(l, "ALLOC ", 6) || !strncmp(l, "VMM_CREATE ", 11)) &&
            line_has(l, "caller_lib=libmegasim_nccl.so"))
            n++;
    cr_expect_eq(n, inits + 2, "%d NCCL buffer allocations", n);
    cr_expect_gt(count_push(d, -1, "ncclAllReduce"), 0);
    /* the collectives reach the (mock) NCCL API */
    cr_expect_gt(count_lines(d, "COLLECTIVE "), 0, "no COLLECTIVE records");
    run_free(&r);
}

Test(faults, another_process_on_the_device, .timeout = 60)
{
    run r;
    megasim(&r, NULL, "--sim-preset", "llama3-8b", "--num-layers", "2", "--train-iters", "1",
            "--sim-foreign-gib", "20", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    const char *d = trace_of(&r, 0);
    const char *m = strstr(d, "\nMEMINFO ");
    cr_assert(m);
    char b[64];
    uint64_t free_b = strtoull(field(m + 1, "free", b, sizeof b), NULL, 10);
    cr_expect_lt(free_b, 60 * GIB, "free %llu: the other process's 20 GiB are not missing",
                 (unsigned long long)free_b);
    run_free(&r);
}

Test(faults, cuda_graph_capture_and_replay, .timeout = 60)
{
    /* TE-scoped graphs after 1 warmup iteration: per layer (2) and
     * microbatch (1) a forward and a backward graph captured into a private
     * pool, then replayed without Python: no layer ranges on the main thread
     * after the capture */
    run r;
    megasim(&r, NULL, "--sim-preset", "llama3-8b", "--num-layers", "2", "--train-iters", "3",
            "--cuda-graph-impl", "transformer_engine", "--cuda-graph-warmup-steps", "1",
            "--profile", "--nvtx-ranges", "--profile-step-start", "0", "--profile-step-end", "3",
            NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    const char *d = trace_of(&r, 0);
    int begins = 0, launches = 0;
    const char *last_capture = NULL;
    for (const char *l = d; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (!strncmp(l, "GRAPH ", 6) && line_has(l, "op=begin_capture"))
            begins++;
        if (!strncmp(l, "GRAPH ", 6) && line_has(l, "op=end_capture"))
            last_capture = l;
        if (!strncmp(l, "GRAPH ", 6) && line_has(l, "op=launch"))
            launches++;
    }
    cr_expect_eq(begins, 2 * 2, "captures: %d", begins);
    cr_expect_eq(launches, 2 * 2 * 2, "launches: %d (2 iterations x 2 layers x fwd+bwd)", launches);
    cr_assert(last_capture);
    cr_expect_eq(count_push(last_capture, -1, "._forward_attention.self_attention"), 0,
                 "layer ranges after the capture");
    cr_expect_gt(count_push(d, -1, "._forward_attention.self_attention"), 0);
    run_free(&r);
}

Test(faults, full_iteration_graph, .timeout = 60)
{
    /* full recompute is allowed with full-iteration graphs; one capture of
     * forward-backward after 1 warmup step, then launches */
    run r;
    megasim(&r, NULL, "--sim-preset", "llama3-8b", "--num-layers", "2", "--train-iters", "4",
            "--cuda-graph-impl", "full_iteration", "--cuda-graph-warmup-steps", "1",
            "--recompute-granularity", "full", "--recompute-method", "uniform",
            "--recompute-num-layers", "1", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    const char *d = trace_of(&r, 0);
    int begins = 0, launches = 0;
    for (const char *l = d; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (!strncmp(l, "GRAPH ", 6) && line_has(l, "op=begin_capture"))
            begins++;
        if (!strncmp(l, "GRAPH ", 6) && line_has(l, "op=launch"))
            launches++;
    }
    cr_expect_eq(begins, 1);
    cr_expect_eq(launches, 3);
    run_free(&r);
}

Test(faults, cuda_graph_private_pools_oom, .timeout = 60)
{
    run r;
    megasim(&r, NULL, "--sim-preset", "llama3-8b", "--num-layers", "2", "--train-iters", "2",
            "--cuda-graph-impl", "transformer_engine", "--cuda-graph-warmup-steps", "1",
            "--sim-graph-pool-gib", "40", NULL);
    cr_expect_neq(r.status, 0, "the pools should not fit");
    cr_expect(strstr(r.err, "allocated in private pools (e.g., CUDA Graphs)"), "%s", r.err);
    const char *d = trace_of(&r, 0);
    /* the OOM happens inside a capture window */
    const char *oom = strstr(d, "\nOOM ");
    cr_assert(oom);
    const char *begin = NULL, *end = NULL;
    for (const char *l = d; l && l < oom; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (!strncmp(l, "GRAPH ", 6) && line_has(l, "op=begin_capture"))
            begin = l;
        if (!strncmp(l, "GRAPH ", 6) && line_has(l, "op=end_capture"))
            end = l;
    }
    cr_expect(begin && (!end || end < begin), "OOM outside a capture");
    run_free(&r);
}

static uint64_t
peak_live(const char *dump)
{
    uint64_t at[1];
    (void)at;
    typedef struct { uint64_t p, s; } ent;
    size_t cap = 1 << 16, n = 0;
    ent *map = calloc(cap, sizeof *map);
    uint64_t live = 0, peak = 0;
    char b[64];
    for (const char *l = dump; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (!strncmp(l, "ALLOC ", 6) && line_has(l, "mem=device")) {
            if (n == cap) {
                cap *= 2;
                map = realloc(map, cap * sizeof *map);
            }
            map[n].p = strtoull(field(l, "ptr", b, sizeof b), NULL, 16);
            map[n].s = strtoull(field(l, "size", b, sizeof b), NULL, 10);
            live += map[n++].s;
            if (live > peak)
                peak = live;
        } else if (!strncmp(l, "FREE ", 5)) {
            uint64_t p = strtoull(field(l, "ptr", b, sizeof b), NULL, 16);
            for (size_t i = n; i-- > 0;)
                if (map[i].p == p && map[i].s) {
                    live -= map[i].s;
                    map[i].s = 0;
                    break;
                }
        }
    }
    free(map);
    return peak;
}

Test(faults, retained_replay_tensors_survive_the_iteration, .timeout = 60)
{
    run w, n;
    megasim(&n, "PYTORCH_NO_CUDA_MEMORY_CACHING=1", "--sim-preset", "llama3-8b", "--num-layers",
            "2", "--train-iters", "2", "--recompute-granularity", "selective",
            "--recompute-modules", "mlp", NULL);
    megasim(&w, "PYTORCH_NO_CUDA_MEMORY_CACHING=1", "--sim-preset", "llama3-8b", "--num-layers",
            "2", "--train-iters", "2", "--recompute-granularity", "selective",
            "--recompute-modules", "mlp", "--sim-retain-replay", NULL);
    cr_assert_eq(n.status, 0, "%s", n.err);
    cr_assert_eq(w.status, 0, "%s", w.err);
    /* the replayed MLP outputs of iteration 1 (2 layers x 64 MiB) are still
     * live at iteration 2's peak */
    uint64_t pn = peak_live(trace_of(&n, 0)), pw = peak_live(trace_of(&w, 0));
    cr_expect_eq(pw - pn, 2 * 64 * MIB, "peak %llu vs %llu", (unsigned long long)pw,
                 (unsigned long long)pn);
    run_free(&n);
    run_free(&w);
}
