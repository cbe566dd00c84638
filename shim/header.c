/* header.c: what a trace says about its process: rank and job identity,
 * clocks, command line, the environment variables that matter, and the
 * loaded modules (for offline symbolisation of callers and stacks). */
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "jobid.h"
#include "recomp/jobid.h"
#include "resolve.h"
#include "stack.h"
#include "tensor_mode.h"
#include "writer.h"

#ifndef RS_SHIM_VERSION
#define RS_SHIM_VERSION "0.0.0"
#endif

static int
env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end = NULL;
    long x = strtol(v, &end, 10);
    return (*end == '\0' && x >= 0 && x <= 0x7fffffff) ? (int)x : dflt;
}

/* Rank detection, launcher by launcher (docs/architecture.md, Writing the trace). */
static void
detect_rank(rs_file_header *h)
{
    h->rank = h->local_rank = h->world_size = h->local_world_size = -1;
    h->rank_source = RS_RANK_NONE;
    if (getenv("RANK")) {
        h->rank_source = RS_RANK_TORCHRUN;
        h->rank = env_int("RANK", -1);
        h->local_rank = env_int("LOCAL_RANK", -1);
        h->world_size = env_int("WORLD_SIZE", -1);
        h->local_world_size = env_int("LOCAL_WORLD_SIZE", -1);
    } else if (getenv("OMPI_COMM_WORLD_RANK")) {
        h->rank_source = RS_RANK_OMPI;
        h->rank = env_int("OMPI_COMM_WORLD_RANK", -1);
        h->local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", -1);
        h->world_size = env_int("OMPI_COMM_WORLD_SIZE", -1);
        h->local_world_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", -1);
    } else if (getenv("SLURM_PROCID")) {
        h->rank_source = RS_RANK_SLURM;
        h->rank = env_int("SLURM_PROCID", -1);
        h->local_rank = env_int("SLURM_LOCALID", -1);
        h->world_size = env_int("SLURM_NTASKS", -1);
        h->local_world_size = env_int("SLURM_NTASKS_PER_NODE", -1);
    } else if (getenv("PMI_RANK")) {
        h->rank_source = RS_RANK_PMI;
        h->rank = env_int("PMI_RANK", -1);
        h->world_size = env_int("PMI_SIZE", -1);
        h->local_rank = env_int("MPI_LOCALRANKID", -1);
        h->local_world_size = env_int("MPI_LOCALNRANKS", -1);
    }
}

static void
copy_env(char *dst, size_t cap, const char *name)
{
    const char *v = getenv(name);
    snprintf(dst, cap, "%s", v ? v : "");
}

void
rs_trace_names(char *run_dir, size_t run_cap, char *file, size_t file_cap)
{
    char host[64], hs[64];
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = '\0';
    rs_sanitize_name(hs, sizeof hs, host);
    rs_file_header tmp;
    detect_rank(&tmp);
    rs_job_run_dir(run_dir, run_cap, g_rs_cfg.run_id, g_rs_cfg.out_dir, tmp.rank, hs);
    if (tmp.rank >= 0)
        snprintf(file, file_cap, "rank%d-%s-%d.rstrace", tmp.rank, hs, (int)getpid());
    else
        snprintf(file, file_cap, "norank-%s-%d.rstrace", hs, (int)getpid());
}

void
rs_header_fill(rs_file_header *h, const char *run_dir_name)
{
    struct timespec mono, real;
    clock_gettime(CLOCK_MONOTONIC, &mono);
    clock_gettime(CLOCK_REALTIME, &real);
    h->version_major = RS_TRACE_VERSION_MAJOR;
    h->version_minor = RS_TRACE_VERSION_MINOR;
    h->header_size = RS_HEADER_SIZE;
    h->chunk_size = RS_CHUNK_SIZE;
    h->pid = (int32_t)getpid();
    h->ppid = (int32_t)getppid();
    h->mode = rs_tensor_mode();
    h->refusals = rs_tensor_refusals();
    h->device = t_rs.device;
    h->mono_start_ns = (uint64_t)mono.tv_sec * 1000000000ull + (uint64_t)mono.tv_nsec;
    h->real_start_ns = (uint64_t)real.tv_sec * 1000000000ull + (uint64_t)real.tv_nsec;
    h->max_bytes = g_rs_cfg.max_bytes;
    h->window_kind = g_rs_cfg.window_kind;
    h->window_a = g_rs_cfg.window_a;
    h->window_b = g_rs_cfg.window_b;
    h->restart_count = env_int("TORCHELASTIC_RESTART_COUNT", -1);
    detect_rank(h);
    if (gethostname(h->host, sizeof h->host) != 0)
        snprintf(h->host, sizeof h->host, "unknown");
    h->host[sizeof h->host - 1] = '\0';
    snprintf(h->run_id, sizeof h->run_id, "%s", run_dir_name);
    copy_env(h->torchelastic_run_id, sizeof h->torchelastic_run_id, "TORCHELASTIC_RUN_ID");
    copy_env(h->slurm_job_id, sizeof h->slurm_job_id, "SLURM_JOB_ID");
    const char *ma = getenv("MASTER_ADDR"), *mp = getenv("MASTER_PORT");
    if (ma || mp)
        snprintf(h->master, sizeof h->master, "%s:%s", ma ? ma : "", mp ? mp : "");
    snprintf(h->shim_version, sizeof h->shim_version, "%s", RS_SHIM_VERSION);
    h->cuda_runtime_version = (uint32_t)rs_cuda_runtime_version();
    if (rs_nvtx_foreign_path())
        h->flags |= RS_HDR_NVTX_FOREIGN;
}

/* Environment variables that change memory behaviour or identify the job.
 * Exact names, then prefixes. */
static const char *const k_env_exact[] = {
    "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING",
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_LAUNCH_BLOCKING",
    "CUDA_MODULE_LOADING", "NVTX_INJECTION64_PATH", "CUDA_INJECTION64_PATH", "LOCAL_WORLD_SIZE",
    "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS", "MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_ID", "LD_PRELOAD",
};
static const char *const k_env_prefix[] = {"NCCL_", "TORCH_NCCL_", "NVTE_", "RECOMPSHIM_",
                                           "TORCH_CUDA", "PYTORCH_"};

static int
env_matters(const char *kv)
{
    const char *eq = strchr(kv, '=');
    if (!eq)
        return 0;
    size_t n = (size_t)(eq - kv);
    for (size_t i = 0; i < sizeof k_env_exact / sizeof *k_env_exact; i++)
        if (strlen(k_env_exact[i]) == n && !strncmp(kv, k_env_exact[i], n))
            return 1;
    for (size_t i = 0; i < sizeof k_env_prefix / sizeof *k_env_prefix; i++)
        if (!strncmp(kv, k_env_prefix[i], strlen(k_env_prefix[i])))
            return 1;
    return rs_job_env_entry(kv); /* what the analyzer needs to join ranks */
}

static void
write_cmdline(void)
{
    char buf[16384];
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    if (n > 0) {
        /* Drop the trailing NUL so arguments are separated, not ended. */
        if (buf[n - 1] == '\0')
            n--;
        rs_record_meta(RS_META_CMDLINE, buf, (size_t)n);
    }
    char exe[PATH_MAX];
    ssize_t m = readlink("/proc/self/exe", exe, sizeof exe);
    if (m > 0)
        rs_record_meta(RS_META_EXE, exe, (size_t)m);
}

/* Modules already recorded in this file (by load bias and path hash), so a
 * refresh writes only new ones. Guarded by g_mod_mu; refreshes are rare. */
#define RS_MAX_MODULES 4096
static struct {
    pthread_mutex_t mu;
    uint64_t key[RS_MAX_MODULES];
    int count;
    unsigned long long last_adds;   /* dlpi_adds at the last refresh */
} g_mod = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int
module_seen(uint64_t key)
{
    for (int i = 0; i < g_mod.count; i++)
        if (g_mod.key[i] == key)
            return 1;
    if (g_mod.count < RS_MAX_MODULES)
        g_mod.key[g_mod.count++] = key;
    return 0;
}

/* One MODULE record per loaded ELF object: bias, PT_LOAD span, build id. */
static int
module_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)arg;
    if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof info->dlpi_adds)
        g_mod.last_adds = info->dlpi_adds;
    const char *nm = info->dlpi_name ? info->dlpi_name : "";
    if (module_seen(info->dlpi_addr ^ rs_checksum(nm, strlen(nm))))
        return 0;
    uint64_t lo = UINT64_MAX, hi = 0;
    const unsigned char *build_id = NULL;
    uint32_t build_id_len = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD) {
            uint64_t a = info->dlpi_addr + ph->p_vaddr;
            if (a < lo)
                lo = a;
            if (a + ph->p_memsz > hi)
                hi = a + ph->p_memsz;
        } else if (ph->p_type == PT_NOTE && !build_id) {
            const unsigned char *p = (const unsigned char *)(info->dlpi_addr + ph->p_vaddr);
            const unsigned char *end = p + ph->p_memsz;
            while (p + sizeof(ElfW(Nhdr)) <= end) {
                const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
                const unsigned char *name = p + sizeof *nh;
                const unsigned char *desc = name + ((nh->n_namesz + 3u) & ~3u);
                if (desc + nh->n_descsz > end)
                    break;
                if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 &&
                    !memcmp(name, "GNU", 4)) {
                    build_id = desc;
                    build_id_len = nh->n_descsz > 64 ? 64 : nh->n_descsz;
                    break;
                }
                p = desc + ((nh->n_descsz + 3u) & ~3u);
            }
        }
    }
    if (hi == 0)
        return 0;
    char exe[PATH_MAX];
    const char *path = info->dlpi_name;
    if (!path || !*path) {
        ssize_t m = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[m > 0 ? m : 0] = '\0';
        path = exe;
    }
    size_t plen = strnlen(path, 4000);
    uint32_t size_rec =
        RS_RECORD_ROUND((uint32_t)(sizeof(rs_rec_module) + build_id_len + plen));
    rs_rec_module *r = rs_rec_begin(size_rec, RS_UNGATED);
    if (!r)
        return 0;
    r->h = (rs_record_header){.kind = RS_REC_MODULE, .size = (uint16_t)size_rec,
                              .t_ns = rs_now_ns()};
    r->base = info->dlpi_addr;
    r->lo = lo;
    r->hi = hi;
    r->build_id_len = build_id_len;
    r->path_len = (uint32_t)plen;
    unsigned char *out = (unsigned char *)(r + 1);
    if (build_id_len)
        memcpy(out, build_id, build_id_len);
    memcpy(out + build_id_len, path, plen);
    rs_rec_end(r, size_rec);
    return 0;
}

void
rs_header_write_startup_records(void)
{
    write_cmdline();
    extern char **environ;
    for (char **e = environ; e && *e; e++)
        if (env_matters(*e))
            rs_record_meta(RS_META_ENV, *e, strlen(*e));
    const char *foreign = rs_nvtx_foreign_path();
    if (foreign)
        rs_record_meta(RS_META_NVTX_OWNER, foreign, strlen(foreign));
    if (g_rs_cfg.tensors[0]) {
        const char *note = rs_tensor_note();
        rs_record_meta(RS_META_TENSORS, note, strlen(note));
        if (rs_tensor_refusals())
            rs_record_meta(RS_META_NOTE, note, strlen(note));
    }
    const char *unw = rs_stack_unwinder();
    rs_record_meta(RS_META_UNWINDER, unw, strlen(unw));
    rs_resolve_report_missing();
    pthread_mutex_lock(&g_mod.mu);
    g_mod.count = 0;
    dl_iterate_phdr(module_cb, NULL);
    pthread_mutex_unlock(&g_mod.mu);
}

/* dl_iterate_phdr's first callback tells the loader's add count: stop
 * there when nothing was loaded since the last refresh. */
static int
adds_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    unsigned long long *adds = arg;
    if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof info->dlpi_adds)
        *adds = info->dlpi_adds;
    return 1;
}

static __thread int t_refreshing __attribute__((tls_model("initial-exec")));

void
rs_modules_refresh(void)
{
    if (rs_writer_state() != RS_W_OPEN || t_refreshing)
        return;
    t_refreshing = 1;
    unsigned long long adds = 0;
    dl_iterate_phdr(adds_cb, &adds);
    if (!adds || adds != __atomic_load_n(&g_mod.last_adds, __ATOMIC_RELAXED)) {
        pthread_mutex_lock(&g_mod.mu);
        dl_iterate_phdr(module_cb, NULL);
        pthread_mutex_unlock(&g_mod.mu);
    }
    t_refreshing = 0;
}

void
rs_modules_atfork_prepare(void)
{
    pthread_mutex_lock(&g_mod.mu);
}

void
rs_modules_atfork_parent(void)
{
    pthread_mutex_unlock(&g_mod.mu);
}

void
rs_modules_atfork_child(void)
{
    pthread_mutex_init(&g_mod.mu, NULL);
    g_mod.count = 0;
    g_mod.last_adds = 0;
}
