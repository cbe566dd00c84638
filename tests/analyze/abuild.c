/* abuild.c: see abuild.h. */
#include "abuild.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define T0 1000000ull /* the builder's mono_start_ns */

ab *
ab_new(void)
{
    ab *a = calloc(1, sizeof *a);
    a->tb = tb_new(0, 16);
    return a;
}

static uint32_t
chunk_of(ab *a, uint32_t tid)
{
    for (int i = 0; i < a->nthreads; i++)
        if (a->tids[i] == tid)
            return a->chunks[i];
    cr_assert(a->nthreads < 16);
    a->tids[a->nthreads] = tid;
    a->chunks[a->nthreads] = tb_chunk(a->tb, tid);
    return a->chunks[a->nthreads++];
}

static void
put(ab *a, uint32_t tid, void *rec, size_t len, uint16_t kind, uint32_t aux, uint64_t t,
    const void *var, size_t varlen)
{
    rs_record_header *h = rec;
    h->kind = kind;
    h->aux = aux;
    h->t_ns = T0 + t;
    tb_put(a->tb, chunk_of(a, tid), rec, len, var, varlen);
}

void
ab_rank(ab *a, int rank, int world)
{
    rs_file_header *h = tb_header(a->tb);
    h->rank = rank;
    h->world_size = world;
    h->rank_source = RS_RANK_TORCHRUN;
}

void
ab_job(ab *a, const char *id)
{
    snprintf(tb_header(a->tb)->torchelastic_run_id, 64, "%s", id);
}

rs_file_header *
ab_header(ab *a)
{
    return tb_header(a->tb);
}

void
ab_window(ab *a, uint64_t t, uint32_t state, uint32_t kind, uint64_t value)
{
    rs_rec_window w = {0};
    w.window_kind = kind;
    w.value = value;
    put(a, AB_MAIN, &w, sizeof w, RS_REC_WINDOW, state, t, NULL, 0);
}

void
ab_note(ab *a, uint64_t t, const char *text)
{
    rs_rec_meta m = {0};
    m.key = RS_META_NOTE;
    m.len = (uint32_t)strlen(text);
    put(a, AB_MAIN, &m, sizeof m, RS_REC_META, 0, t, text, m.len);
}

void
ab_module(ab *a, uint64_t t, uint64_t lo, uint64_t hi, const char *path)
{
    rs_rec_module m = {0};
    m.base = lo;
    m.lo = lo;
    m.hi = hi;
    m.path_len = (uint32_t)strlen(path);
    put(a, AB_MAIN, &m, sizeof m, RS_REC_MODULE, 0, t, path, m.path_len);
}

void
ab_mode(ab *a, uint32_t mode)
{
    tb_header(a->tb)->mode = mode;
}

void
ab_cmdline(ab *a, uint64_t t, const char *const *argv)
{
    char buf[2048];
    size_t n = 0;
    for (int i = 0; argv[i]; i++) {
        size_t l = strlen(argv[i]) + 1;
        memcpy(buf + n, argv[i], l);
        n += l;
    }
    rs_rec_meta m = {0};
    m.key = RS_META_CMDLINE;
    m.len = (uint32_t)(n - 1);
    put(a, AB_MAIN, &m, sizeof m, RS_REC_META, 0, t, buf, n - 1);
}

void
ab_thread(ab *a, uint32_t tid, uint64_t t, const char *name)
{
    rs_rec_thread r = {0};
    r.tid = tid;
    r.pthread = tid * 16ull;
    snprintf(r.name, sizeof r.name, "%s", name);
    put(a, tid, &r, sizeof r, RS_REC_THREAD, 0, t, NULL, 0);
}

static void
nvtx(ab *a, uint16_t kind, uint32_t tid, uint64_t t, const char *name)
{
    rs_rec_nvtx_name r = {0};
    r.text_len = (uint32_t)strlen(name);
    put(a, tid, &r, sizeof r, kind, 1, t, name, r.text_len);
}

void
ab_push(ab *a, uint32_t tid, uint64_t t, const char *name)
{
    nvtx(a, RS_REC_NVTX_PUSH, tid, t, name);
}

void
ab_mark(ab *a, uint32_t tid, uint64_t t, const char *name)
{
    nvtx(a, RS_REC_NVTX_MARK, tid, t, name);
}

void
ab_pop(ab *a, uint32_t tid, uint64_t t)
{
    rs_rec_nvtx_pop r = {0};
    put(a, tid, &r, sizeof r, RS_REC_NVTX_POP, 0, t, NULL, 0);
}

void
ab_alloc_api(ab *a, uint32_t tid, uint64_t t, uint64_t ptr, uint64_t size, uint16_t api,
             uint8_t mem)
{
    rs_rec_alloc r = {0};
    r.ptr = ptr;
    r.size = size;
    r.api = api;
    r.mem = mem;
    r.device = 0;
    put(a, tid, &r, sizeof r, RS_REC_ALLOC, 0, t, NULL, 0);
}

void
ab_alloc(ab *a, uint32_t tid, uint64_t t, uint64_t ptr, uint64_t size)
{
    ab_alloc_api(a, tid, t, ptr, size, RS_API_cudaMalloc, RS_MEM_DEVICE);
}

void
ab_free(ab *a, uint32_t tid, uint64_t t, uint64_t ptr)
{
    rs_rec_free r = {0};
    r.ptr = ptr;
    r.api = RS_API_cudaFree;
    put(a, tid, &r, sizeof r, RS_REC_FREE, 0, t, NULL, 0);
}

void
ab_oom(ab *a, uint32_t tid, uint64_t t, uint64_t size, uint64_t free_b, uint64_t total,
       const uint64_t *frames, uint32_t nframes)
{
    rs_rec_oom r = {0};
    r.size = size;
    r.free_bytes = free_b;
    r.total_bytes = total;
    r.api = RS_API_cudaMalloc;
    r.status = 2;
    r.meminfo_status = total ? 0 : -1;
    put(a, tid, &r, sizeof r, RS_REC_OOM, nframes, t, frames, nframes * 8u);
}

void
ab_meminfo(ab *a, uint32_t tid, uint64_t t, uint64_t free_b, uint64_t total)
{
    rs_rec_meminfo r = {0};
    r.free_bytes = free_b;
    r.total_bytes = total;
    put(a, tid, &r, sizeof r, RS_REC_MEMINFO, RS_MEMINFO_SAMPLE, t, NULL, 0);
}

#if RS_TRACE_VERSION_MINOR >= 1
void
ab_tensor(ab *a, uint32_t tid, uint64_t t, uint64_t ptr, int64_t size, uint64_t total_alloc,
          uint64_t total_reserved)
{
    rs_rec_tensor r = {0};
    r.ptr = ptr;
    r.size = size;
    r.total_allocated = total_alloc;
    r.total_reserved = total_reserved;
    r.device_type = 1;
    r.device = 0;
    put(a, tid, &r, sizeof r, RS_REC_TENSOR, 1, t, NULL, 0);
}

void
ab_coll(ab *a, uint32_t tid, uint64_t t, uint32_t op, uint64_t bytes)
{
    rs_rec_collective r = {0};
    r.comm = 0x77;
    r.bytes = bytes;
    r.count = bytes / 4;
    r.api = op == RS_COLL_ALL_GATHER ? RS_API_ncclAllGather
          : op == RS_COLL_REDUCE_SCATTER ? RS_API_ncclReduceScatter : RS_API_ncclAllReduce;
    r.datatype = 7;
    r.redop = 0;
    r.peer = -1;
    r.nranks = -1;
    r.rank = -1;
    put(a, tid, &r, sizeof r, RS_REC_COLLECTIVE, op, t, NULL, 0);
}
#endif

size_t
ab_write(ab *a, const char *path, int closed)
{
    for (int i = 0; i < a->nthreads; i++)
        tb_seal(a->tb, a->chunks[i]);
    size_t len = tb_finish(a->tb, closed);
    cr_assert_eq(tb_write(a->tb, path, len), 0, "writing %s", path);
    tb_free(a->tb);
    free(a);
    return len;
}

/* Paths a test uses until its process ends: kept reachable here, so
 * LeakSanitizer (the sanitizer tier) does not count them as leaks. */
static char **g_kept;
static size_t g_nkept, g_capkept;

char *
ab_keep(char *p)
{
    if (g_nkept == g_capkept) {
        size_t cap = g_capkept ? g_capkept * 2 : 64;
        char **q = realloc(g_kept, cap * sizeof *q);
        cr_assert(q != NULL);
        g_kept = q;
        g_capkept = cap;
    }
    g_kept[g_nkept++] = p;
    return p;
}

char *
ab_tmpdir(void)
{
    char *p = strdup("/tmp/rs-analyze-XXXXXX");
    cr_assert(mkdtemp(p));
    return ab_keep(p);
}

static char *
slurp(FILE *f)
{
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    size_t k;
    rewind(f);
    while ((k = fread(b + n, 1, cap - n - 1, f)) > 0) {
        n += k;
        if (n + 1 >= cap)
            b = realloc(b, cap *= 2);
    }
    b[n] = 0;
    return b;
}

int
ab_run(const char *const *args, char **out, char **err)
{
    FILE *fo = tmpfile(), *fe = tmpfile();
    cr_assert(fo && fe);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        const char *argv[32];
        int n = 0;
        argv[n++] = RECOMP_ANALYZE_PATH;
        for (int i = 0; args[i] && n < 31; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        dup2(fileno(fo), 1);
        dup2(fileno(fe), 2);
        execv(RECOMP_ANALYZE_PATH, (char *const *)argv);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    *out = slurp(fo);
    *err = slurp(fe);
    fclose(fo);
    fclose(fe);
    cr_assert(WIFEXITED(st), "recomp-analyze crashed (signal %d); stderr:\n%s",
              WIFSIGNALED(st) ? WTERMSIG(st) : 0, *err);
    return WEXITSTATUS(st);
}

yajl_val
ab_json(const char *text)
{
    char e[256];
    return yajl_tree_parse(text, e, sizeof e);
}

yajl_val
ab_get(yajl_val v, const char *path)
{
    char key[128];
    const char *p = path;
    while (v && *p) {
        size_t n = strcspn(p, ".[");
        if (n) {
            snprintf(key, sizeof key, "%.*s", (int)n, p);
            const char *keys[] = {key, NULL};
            v = yajl_tree_get(v, keys, yajl_t_any);
            p += n;
        }
        if (*p == '[') {
            long idx = strtol(p + 1, (char **)&p, 10);
            p++; /* ']' */
            if (!v || !YAJL_IS_ARRAY(v) || idx < 0 || (size_t)idx >= v->u.array.len)
                return NULL;
            v = v->u.array.values[idx];
        }
        if (*p == '.')
            p++;
    }
    return v;
}

long long
ab_int(yajl_val root, const char *path)
{
    yajl_val v = ab_get(root, path);
    cr_assert(v && YAJL_IS_INTEGER(v), "JSON %s: not an integer", path);
    return YAJL_GET_INTEGER(v);
}

const char *
ab_str(yajl_val root, const char *path)
{
    yajl_val v = ab_get(root, path);
    return v && YAJL_IS_STRING(v) ? YAJL_GET_STRING(v) : "";
}

int
ab_is_null(yajl_val root, const char *path)
{
    yajl_val v = ab_get(root, path);
    return v && YAJL_IS_NULL(v);
}

int
ab_contrib(yajl_val root, const char *peak_path, const char *phase, const char *boundary,
           int layer)
{
    char p[256];
    snprintf(p, sizeof p, "%s.contributors", peak_path);
    yajl_val arr = ab_get(root, p);
    if (!arr || !YAJL_IS_ARRAY(arr))
        return -1;
    for (size_t i = 0; i < arr->u.array.len; i++) {
        yajl_val g = arr->u.array.values[i];
        const char *ph = ab_str(g, "phase"), *bd = ab_str(g, "boundary");
        yajl_val l = ab_get(g, "layer");
        int lv = l && YAJL_IS_INTEGER(l) ? (int)YAJL_GET_INTEGER(l) : 0;
        if (!strcmp(ph, phase) && !strcmp(bd, boundary) && lv == layer)
            return (int)i;
    }
    return -1;
}

/* ---- issue 14 C/M: expandable segments' pages, device figures ---- */

void
ab_env(ab *a, uint64_t t, const char *name_value)
{
    rs_rec_meta m = {0};
    m.key = RS_META_ENV;
    m.len = (uint32_t)strlen(name_value);
    put(a, AB_MAIN, &m, sizeof m, RS_REC_META, 0, t, name_value, m.len);
}

#if RS_TRACE_VERSION_MINOR >= 1
void
ab_vmm(ab *a, uint32_t tid, uint64_t t, uint16_t kind, uint64_t handle, uint64_t size,
       uint64_t caller, int32_t status)
{
    rs_rec_vmm r = {0};
    r.handle = handle;
    r.size = size;
    r.caller = caller;
    r.api = kind == RS_REC_VMM_CREATE ? RS_API_cuMemCreate : RS_API_cuMemRelease;
    r.device = 0;
    r.status = status;
    put(a, tid, &r, sizeof r, kind, 0, t, NULL, 0);
}
#endif

void
ab_oom_api(ab *a, uint32_t tid, uint64_t t, uint64_t size, uint64_t free_b, uint64_t total,
           uint16_t api, uint64_t caller)
{
    rs_rec_oom r = {0};
    r.size = size;
    r.caller = caller;
    r.free_bytes = free_b;
    r.total_bytes = total;
    r.api = api;
    r.status = 2;
    r.meminfo_status = total ? 0 : -1;
    put(a, tid, &r, sizeof r, RS_REC_OOM, 0, t, NULL, 0);
}
