/* writer.c: the crash-safe trace file.
 *
 *   file:  [ header page | chunk 0 | chunk 1 | ... ]
 *   chunk: [ rs_chunk_header | record | record | ... free ... ]
 *
 * Each thread owns one chunk at a time. Appending a record is: write the
 * bytes, then release-store chunk.used. No lock, no syscall. A full chunk is
 * sealed (checksum) and unmapped; the next index comes from one atomic
 * counter, the space from fallocate (so a full disk is an error here, never
 * a SIGBUS in the job), the mapping from mmap(MAP_SHARED). The header's
 * chunks_published only grows. Because the mappings are shared file pages,
 * a SIGKILL loses nothing already published.
 *
 * The file is created at the process's first CUDA call (rs_trace_open), not
 * at load: torchrun's launcher and data-loader workers never get one.
 */
#include "writer.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "config.h"
#include "pystack.h"

__thread rs_tls t_rs __attribute__((tls_model("initial-exec"))) = {.device = -1};

#define RS_REGISTRY_SLOTS 4096
/* The reserved tail: an eighth of the chunks under RECOMPSHIM_MAX_BYTES,
 * at least 1 and at most 8 (2 MiB): OOM records land there past the limit. */
#define RS_RESERVED_TAIL_MAX 8u

enum { SLOT_FREE = 0, SLOT_ACTIVE = 1, SLOT_SEALING = 2 };

struct chunk_slot {
    _Atomic(unsigned char *) chunk;
    atomic_int state;
};

rs_writer_hot rs_w_hot;

static struct {
    pthread_mutex_t open_mu;         /* file creation only */
    int fd;                          /* moved to a high number; checked before use */
    dev_t dev;                       /* the trace file's identity, to tell */
    ino_t ino;                       /* a reused descriptor from ours */
    pthread_mutex_t fd_mu;           /* reopening after the job closed fd */
    /* hdr: rs_w_hot.hdr (record.h) */
    atomic_uint next_chunk;          /* next index to claim */
    uint32_t limit_chunks;           /* gated records stop at this many chunks on disk */
    uint32_t max_chunks;             /* nothing is claimed past this many on disk */
    atomic_uint returned_chunks;     /* chunk-sized space given back by exited threads */
    atomic_ullong returned_bytes;    /* the bytes behind it (punched tails, 4 KiB pages) */
    /* state, limit_hit and gen: rs_w_hot (record.h), a line of their own */
    pthread_key_t exit_key;
    char path[PATH_MAX + 512];
    struct chunk_slot slots[RS_REGISTRY_SLOTS];
} g_w = {.open_mu = PTHREAD_MUTEX_INITIALIZER, .fd_mu = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

/* Lowest descriptor number the trace file is moved to: jobs hand out low
 * numbers, and closefrom()-style cleanups are caught by trace_fd(). */
#define RS_FD_FLOOR 700

/* Per-thread registry slot of the current chunk (-1 none). */
static __thread int t_slot __attribute__((tls_model("initial-exec"))) = -1;

uint32_t
rs_gettid(void)
{
    if (!t_rs.tid)
        t_rs.tid = (uint32_t)syscall(SYS_gettid);
    return t_rs.tid;
}

void
rs_writer_set_disabled(void)
{
    __atomic_store_n(&rs_w_hot.state, RS_W_DISABLED, __ATOMIC_RELEASE);
    if (rs_w_hot.hdr)
        rs_writer_set_flags(RS_HDR_DISABLED);
}

rs_file_header *
rs_writer_header(void)
{
    return rs_writer_state() == RS_W_OPEN ? rs_w_hot.hdr : NULL;
}

const char *
rs_writer_path(void)
{
    return g_w.path;
}

int
rs_writer_limit_hit(void)
{
    return __atomic_load_n(&rs_w_hot.limit_hit, __ATOMIC_RELAXED);
}

void
rs_writer_count_dropped(void)
{
    rs_file_header *h = rs_w_hot.hdr;
    if (h)
        __atomic_fetch_add(&h->dropped_records, 1, __ATOMIC_RELAXED);
}

void
rs_writer_set_flags(uint32_t flags)
{
    if (rs_w_hot.hdr)
        __atomic_fetch_or(&rs_w_hot.hdr->flags, flags, __ATOMIC_RELEASE);
}

static inline rs_chunk_header *
chunk_hdr(unsigned char *c)
{
    return (rs_chunk_header *)c;
}

/* Seal a chunk: checksum over what is published now. Returns 1 when this
 * caller sealed it (and may unmap it), 0 when the exit path owns it. */
static int
seal_chunk(unsigned char *c, int slot)
{
    if (slot >= 0) {
        int expect = SLOT_ACTIVE;
        if (!atomic_compare_exchange_strong(&g_w.slots[slot].state, &expect, SLOT_SEALING))
            return 0;
    }
    rs_chunk_header *ch = chunk_hdr(c);
    uint32_t used = __atomic_load_n(&ch->used, __ATOMIC_ACQUIRE);
    ch->checksum = rs_checksum4(c + sizeof *ch, used); /* format 1.5: four lanes */
    ch->checksum_len = used;
    __atomic_fetch_or(&ch->flags, RS_CHUNK_SEALED, __ATOMIC_RELEASE);
    if (slot >= 0) {
        atomic_store(&g_w.slots[slot].chunk, NULL);
        atomic_store(&g_w.slots[slot].state, SLOT_FREE);
    }
    return 1;
}

static int
register_chunk(unsigned char *c)
{
    for (int i = 0; i < RS_REGISTRY_SLOTS; i++) {
        int expect = SLOT_FREE;
        if (atomic_load_explicit(&g_w.slots[i].state, memory_order_relaxed) == SLOT_FREE &&
            atomic_compare_exchange_strong(&g_w.slots[i].state, &expect, SLOT_ACTIVE)) {
            atomic_store(&g_w.slots[i].chunk, c);
            return i;
        }
    }
    return -1; /* unregistered: left unsealed at exit, still readable */
}

static int trace_fd(void);

/* Give the unused tail of a sealed chunk (index idx, used payload bytes)
 * back to the file system: fallocate(FALLOC_FL_PUNCH_HOLE | KEEP_SIZE) from
 * the first 4 KiB page after the published records to the chunk's end. The
 * tail holds no record (a reader stops at chunk.used, and the checksum
 * covers only the used bytes), reads back as zeros, and crash safety is
 * unchanged. A thread that records little and exits (a job that starts
 * threads by the thousand) then costs the pages it wrote, not 256 KiB
 * (hnew2: 5,000 short threads wrote a 1.31 GB trace). The whole chunks'
 * worth of bytes returned so far (returned_chunks) no longer count against
 * RECOMPSHIM_MAX_BYTES (claim_chunk). A file system without hole punching
 * (EOPNOTSUPP) keeps the space, as before. */
static void
return_chunk_tail(uint32_t idx, uint32_t used)
{
    const uint64_t page = 4096;
    uint64_t keep = (sizeof(rs_chunk_header) + (uint64_t)used + page - 1) / page * page;
    if (keep + page > RS_CHUNK_SIZE)
        return;
    int fd = trace_fd();
    if (fd < 0)
        return;
    off_t off = (off_t)RS_HEADER_SIZE + (off_t)idx * RS_CHUNK_SIZE + (off_t)keep;
    int saved = errno;
    if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off,
                  (off_t)(RS_CHUNK_SIZE - keep)) == 0) {
        unsigned long long total =
            atomic_fetch_add(&g_w.returned_bytes, RS_CHUNK_SIZE - keep) + RS_CHUNK_SIZE - keep;
        atomic_store(&g_w.returned_chunks, (unsigned)(total / RS_CHUNK_SIZE));
    }
    errno = saved;
}

/* Seal and unmap the calling thread's chunk; at_exit: the thread is
 * leaving, so the chunk's unused tail goes back to the file system. */
static void
release_thread_chunk(int at_exit)
{
    if (!t_rs.chunk)
        return;
    uint32_t used = __atomic_load_n(&chunk_hdr(t_rs.chunk)->used, __ATOMIC_ACQUIRE);
    if (seal_chunk(t_rs.chunk, t_slot)) {
        munmap(t_rs.chunk, RS_CHUNK_SIZE);
        if (at_exit)
            return_chunk_tail(t_rs.chunk_index, used);
    }
    t_rs.chunk = NULL;
    t_slot = -1;
}

static void
thread_exit(void *arg)
{
    (void)arg;
    if (t_rs.gen == __atomic_load_n(&rs_w_hot.gen, __ATOMIC_SEQ_CST) && rs_writer_state() == RS_W_OPEN)
        release_thread_chunk(1);
}

static void write_limit_record(void);
static void init_header(const char *run_dir);

/* The trace file's descriptor, checked: a job may close every descriptor
 * (daemons, closefrom) and reuse the number for its own file. The shim must
 * never write there: compare device and inode, and reopen the trace by its
 * path when they differ. -1 (and the shim disabled) when it cannot. */
static int
trace_fd(void)
{
    struct stat st;
    int fd = g_w.fd;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == g_w.dev && st.st_ino == g_w.ino)
        return fd;
    pthread_mutex_lock(&g_w.fd_mu);
    fd = g_w.fd;
    if (!(fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == g_w.dev && st.st_ino == g_w.ino)) {
        fd = open(g_w.path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0 && (fstat(fd, &st) != 0 || st.st_dev != g_w.dev || st.st_ino != g_w.ino)) {
            close(fd);
            fd = -1;
        }
        if (fd >= 0) {
            int hi = fcntl(fd, F_DUPFD_CLOEXEC, RS_FD_FLOOR);
            if (hi >= 0) {
                close(fd);
                fd = hi;
            }
        }
        /* the old number is the job's now: never close it */
        g_w.fd = fd;
    }
    pthread_mutex_unlock(&g_w.fd_mu);
    if (fd < 0)
        rs_disable("the job closed the trace file's descriptor and the file cannot be reopened",
                   errno);
    return fd;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 uapi value; older kernels say EINVAL */
#endif

/* 0 untested, 1 the kernel pre-faults writable pages, -1 it does not. */
static atomic_int g_populate_write;

/* Write zeros over a freshly fallocate'd chunk at `off` (bytes) with one
 * pwritev: the pages enter the page cache through the write path, dirty
 * and with their blocks mapped, instead of each being read in (readahead of
 * unwritten extents) and then made writable (page_mkwrite) at its first
 * store. Measured on ext4 (docs/performance.md): fallocate + mmap +
 * populate + munmap of a 256 KiB chunk took 307 us of CPU; with this
 * pwritev first, 57 us. Returns 0, or -1 (the caller maps anyway: the
 * fallocate'd space is already reserved, so only speed is lost). */
static int
zero_fill(int fd, off_t off)
{
    static const unsigned char zero[4096];
    struct iovec iov[RS_CHUNK_SIZE / sizeof zero];
    for (size_t i = 0; i < sizeof iov / sizeof iov[0]; i++)
        iov[i] = (struct iovec){.iov_base = (void *)zero, .iov_len = sizeof zero};
    size_t done = 0;
    while (done < RS_CHUNK_SIZE) {
        size_t skip = done / sizeof zero;
        struct iovec *v = iov + skip;
        v->iov_base = (void *)(zero + done % sizeof zero);
        v->iov_len = sizeof zero - done % sizeof zero;
        ssize_t n = pwritev(fd, v, (int)(sizeof iov / sizeof iov[0] - skip), off + (off_t)done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        done += (size_t)n;
    }
    return 0;
}

/* Map one chunk of the trace file at `off` (bytes), shared and writable,
 * with every page already in the page cache and faulted in for writing:
 * otherwise each first write to a 4 KiB page inside a hook takes a
 * write-protect fault, a read of the unwritten extent and the file system's
 * page_mkwrite (MAP_POPULATE maps shared file pages read-only, so it does
 * not avoid them). zero_fill puts the pages in the cache; one
 * MADV_POPULATE_WRITE call (Linux >= 5.14, madvise(2)) maps all 64 in one
 * kernel entry; where the kernel lacks it, the fallback writes one zero per
 * page here, at the claim, so the faults still leave the record path (the
 * chunk was just fallocate'd: its bytes are zero, the writes change
 * nothing). The pages are the file's page cache either way: crash safety is
 * unchanged. Returns the mapping or MAP_FAILED (errno set). */
static unsigned char *
map_chunk(int fd, off_t off)
{
    int saved = errno;
    zero_fill(fd, off);
    errno = saved;
    unsigned char *c = mmap(NULL, RS_CHUNK_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off);
    if (c == MAP_FAILED)
        return c;
    int pw = atomic_load_explicit(&g_populate_write, memory_order_relaxed);
    if (pw >= 0) {
        int ok = madvise(c, RS_CHUNK_SIZE, MADV_POPULATE_WRITE) == 0;
        if (!ok && (errno == EINVAL || errno == ENOSYS || errno == EPERM))
            atomic_store_explicit(&g_populate_write, -1, memory_order_relaxed);
        errno = saved;
        if (ok)
            return c;
    }
    for (size_t p = 0; p < RS_CHUNK_SIZE; p += 4096)
        ((volatile unsigned char *)c)[p] = 0;
    return c;
}

/* Claim, allocate, map and initialise the next chunk for this thread.
 * Returns 0 or -1 (nothing left, or the shim disabled itself). */
static int
claim_chunk(void)
{
    /* the limits count chunks on disk: indices less the space exited
     * threads gave back (return_chunk_tail) */
    uint32_t back = atomic_load_explicit(&g_w.returned_chunks, memory_order_relaxed);
    uint32_t idx = atomic_load_explicit(&g_w.next_chunk, memory_order_relaxed);
    if (idx - back >= g_w.max_chunks || idx >= UINT32_MAX - 1)
        return -1;
    idx = atomic_fetch_add(&g_w.next_chunk, 1);
    if (idx - back >= g_w.max_chunks || idx >= UINT32_MAX - 1)
        return -1;
    int flipped = 0;
    int tail = idx - back >= g_w.limit_chunks;
    if (tail) {
        int expect = 0;
        flipped = __atomic_compare_exchange_n(&rs_w_hot.limit_hit, &expect, 1, 0, __ATOMIC_SEQ_CST,
                                              __ATOMIC_SEQ_CST);
    }
    off_t off = (off_t)RS_HEADER_SIZE + (off_t)idx * RS_CHUNK_SIZE;
    int fd = trace_fd();
    if (fd < 0)
        return -1;
    int rc = posix_fallocate(fd, off, RS_CHUNK_SIZE);
    if (rc != 0) {
        rs_disable(rc == ENOSPC ? "cannot grow the trace file: the disk is full"
                                : "cannot grow the trace file",
                   rc);
        return -1;
    }
    unsigned char *c = map_chunk(fd, off);
    if (c == MAP_FAILED) {
        rs_disable("cannot map a trace chunk", errno);
        return -1;
    }
    rs_chunk_header *ch = chunk_hdr(c);
    ch->index = idx;
    ch->tid = rs_gettid();
    ch->flags = tail ? RS_CHUNK_TAIL : 0;
    ch->used = 0;
    ch->record_count = 0;
    __atomic_store_n(&ch->magic, RS_CHUNK_MAGIC, __ATOMIC_RELEASE);
    /* Publish: chunks_published = max(chunks_published, idx + 1). */
    uint32_t cur = __atomic_load_n(&rs_w_hot.hdr->chunks_published, __ATOMIC_RELAXED);
    while (cur < idx + 1 &&
           !__atomic_compare_exchange_n(&rs_w_hot.hdr->chunks_published, &cur, idx + 1, 1,
                                        __ATOMIC_RELEASE, __ATOMIC_RELAXED))
        ;
    t_rs.chunk = c;
    t_rs.chunk_index = idx;
    t_rs.chunk_epoch++; /* compact records: new time base and sites (v1.4) */
    t_slot = register_chunk(c);
    if (flipped) {
        rs_w_hot.hdr->limit_hit_ns = rs_now_ns();
        rs_writer_set_flags(RS_HDR_LIMIT_HIT);
        write_limit_record();
    }
    return 0;
}

/* A thread's first record in this file: a chunk, its name, and the NVTX
 * ranges it had open before the file existed. */
static int
thread_attach(void)
{
    t_rs.chunk = NULL;
    t_slot = -1;
    t_rs.gen = __atomic_load_n(&rs_w_hot.gen, __ATOMIC_SEQ_CST);
    if (claim_chunk() != 0)
        return -1;
    pthread_setspecific(g_w.exit_key, (void *)1);
    char name[RS_THREAD_NAME_LEN] = {0};
    prctl(PR_GET_NAME, name, 0, 0, 0);
    rs_record_thread(rs_gettid(), (uint64_t)pthread_self(), name, 0);
    rs_nvtx_thread_attach();
    return 0;
}

void *
rs_rec_begin(uint32_t size, int cls)
{
    if (rs_writer_state() != RS_W_OPEN)
        return NULL;
    if (cls == RS_GATED && __atomic_load_n(&rs_w_hot.limit_hit, __ATOMIC_RELAXED)) {
        rs_writer_count_dropped();
        return NULL;
    }
    if (__builtin_expect(!t_rs.chunk ||
                             t_rs.gen != __atomic_load_n(&rs_w_hot.gen, __ATOMIC_RELAXED),
                         0)) {
        if (thread_attach() != 0)
            return NULL;
    }
    rs_chunk_header *ch = chunk_hdr(t_rs.chunk);
    if (ch->used + size > RS_CHUNK_PAYLOAD) {
        release_thread_chunk(0);
        if (claim_chunk() != 0)
            return NULL;
        rs_modules_refresh();
        if (cls == RS_GATED && __atomic_load_n(&rs_w_hot.limit_hit, __ATOMIC_RELAXED)) {
            rs_writer_count_dropped();
            return NULL;
        }
        ch = chunk_hdr(t_rs.chunk);
    }
    return t_rs.chunk + sizeof(rs_chunk_header) + ch->used;
}

void
rs_rec_end(void *rec, uint32_t size)
{
    rs_rec_end_n(size, 1, ((const rs_record_header *)rec)->t_ns);
}

static void
write_limit_record(void)
{
    rs_rec_limit *r = rs_rec_begin(sizeof *r, RS_UNGATED);
    if (!r)
        return;
    r->h = (rs_record_header){.kind = RS_REC_LIMIT, .size = sizeof *r, .t_ns = rs_now_ns()};
    r->max_bytes = g_rs_cfg.max_bytes;
    rs_rec_end(r, sizeof *r);
}

void
rs_writer_sync(void)
{
    if (rs_writer_state() != RS_W_OPEN)
        return;
    if (t_rs.chunk)
        msync(t_rs.chunk, RS_CHUNK_SIZE, MS_SYNC);
    msync(rs_w_hot.hdr, RS_HEADER_SIZE, MS_SYNC);
}

/* mkdir -p with mode 0700 for components we create. */
static int
mkdir_parents(const char *dir)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s", dir) >= (int)sizeof tmp)
        return ENAMETOOLONG;
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
            return errno;
        *p = '/';
    }
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
        return errno;
    return 0;
}

/* A directory we write into: ours, and not writable by others unless
 * sticky. Returns NULL when acceptable, else the reason. */
static const char *
dir_unsafe(const struct stat *st)
{
    if (!S_ISDIR(st->st_mode))
        return "is not a directory";
    if (st->st_uid != geteuid())
        return "is not owned by the user running the job";
    if ((st->st_mode & (S_IWGRP | S_IWOTH)) && !(st->st_mode & S_ISVTX))
        return "is group- or world-writable without the sticky bit";
    return NULL;
}

static void
refuse_dir(const char *dir, const char *why)
{
    char msg[PATH_MAX + 512];
    snprintf(msg, sizeof msg, "%s %s", dir, why);
    rs_disable(msg, 0);
}

/* Refuse (one stderr line, the job runs untraced) an output path that
 * does not fit: RECOMPSHIM_OUT longer than a path may be, or the whole
 * trace path (with room for an exec's "-x<n>" suffix). Never cut it: a cut
 * path is a different directory. Returns 1 when refused. */
static int
path_refused(const char *out, const char *run_dir, const char *file)
{
    char msg[160];
    if (g_rs_cfg.out_dir_len >= sizeof g_rs_cfg.out_dir) {
        snprintf(msg, sizeof msg, "RECOMPSHIM_OUT is %zu bytes, longer than a path may be (%d)",
                 g_rs_cfg.out_dir_len, PATH_MAX - 1);
        rs_disable(msg, ENAMETOOLONG);
        return 1;
    }
    size_t total = strlen(out) + 1 + strlen(run_dir) + 1 + strlen(file) + sizeof "-x99";
    if (total >= PATH_MAX) {
        snprintf(msg, sizeof msg,
                 "the trace path under RECOMPSHIM_OUT would be %zu bytes, longer than a path "
                 "may be (%d)", total, PATH_MAX - 1);
        rs_disable(msg, ENAMETOOLONG);
        return 1;
    }
    return 0;
}

/* Create RECOMPSHIM_OUT (when missing) and the run directory in it, both
 * checked (ours, not writable by others). Returns the run directory's
 * descriptor, or -1 with the shim disabled. */
static int
open_run_dir(const char *out, const char *run_dir)
{
    int err = mkdir_parents(out);
    if (err) {
        char msg[PATH_MAX + 64];
        snprintf(msg, sizeof msg, "cannot create RECOMPSHIM_OUT %s", out);
        rs_disable(msg, err);
        return -1;
    }
    int dfd = open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat st;
    if (dfd < 0 || fstat(dfd, &st) != 0) {
        char msg[PATH_MAX + 64];
        snprintf(msg, sizeof msg, "cannot open RECOMPSHIM_OUT %s", out);
        rs_disable(msg, errno);
        if (dfd >= 0)
            close(dfd);
        return -1;
    }
    const char *why = dir_unsafe(&st);
    if (why) {
        char what[PATH_MAX + 32];
        snprintf(what, sizeof what, "RECOMPSHIM_OUT %s", out);
        refuse_dir(what, why);
        close(dfd);
        return -1;
    }
    if (mkdirat(dfd, run_dir, 0700) != 0 && errno != EEXIST) {
        rs_disable("cannot create the run directory", errno);
        close(dfd);
        return -1;
    }
    int rfd = openat(dfd, run_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    close(dfd);
    if (rfd < 0 || fstat(rfd, &st) != 0) {
        rs_disable("cannot open the run directory (a symlink?)", errno);
        if (rfd >= 0)
            close(rfd);
        return -1;
    }
    if ((why = dir_unsafe(&st)) != NULL) {
        char what[PATH_MAX + 192];
        snprintf(what, sizeof what, "the run directory %s/%s", out, run_dir);
        refuse_dir(what, why);
        close(rfd);
        return -1;
    }
    return rfd;
}

/* Give the finished file (under the hidden name tmp) its trace name, never
 * replacing a file: the name is taken when this pid already wrote a trace
 * in this run (the process exec'ed: same pid, new program), then the next
 * "-x<n>" is tried. Updates file; returns 0 or an errno. */
static int
publish_name(int rfd, const char *tmp, char *file, size_t cap)
{
    char base[256];
    snprintf(base, sizeof base, "%.*s", (int)(strlen(file) - strlen(".rstrace")), file);
    for (int n = 0; n < 100; n++) {
        if (n)
            snprintf(file, cap, "%.240s-x%d.rstrace", base, n);
        if (renameat2(rfd, tmp, rfd, file, RENAME_NOREPLACE) == 0)
            return 0;
        if (errno == EEXIST)
            continue;
        if (errno != EINVAL && errno != ENOSYS)
            return errno;
        /* no RENAME_NOREPLACE on this file system: link, then unlink */
        if (linkat(rfd, tmp, rfd, file, 0) == 0) {
            unlinkat(rfd, tmp, 0);
            return 0;
        }
        if (errno != EEXIST)
            return errno;
    }
    return EEXIST;
}

/* Create the trace file in the run directory: under a hidden temporary
 * name (".<file>.part", not a trace name) until the header is complete,
 * then renamed, so a kill during creation leaves no file that looks like a
 * damaged trace. Fills g_w.fd, rs_w_hot.hdr, g_w.path. Returns 0 or -1 (the
 * shim disabled, nothing left behind but a .part file after a kill). */
static int
create_trace(int rfd, const char *out, const char *run_dir, char *file, size_t cap)
{
    char tmp[300];
    snprintf(tmp, sizeof tmp, ".%s.part", file);
    int fd = openat(rfd, tmp, O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) {
        /* left by a process with this pid killed while creating its trace */
        unlinkat(rfd, tmp, 0);
        fd = openat(rfd, tmp, O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0600);
    }
    if (fd < 0) {
        rs_disable("cannot create the trace file", errno);
        return -1;
    }
    int rc = posix_fallocate(fd, 0, RS_HEADER_SIZE);
    void *h = rc == 0 ? mmap(NULL, RS_HEADER_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                      : MAP_FAILED;
    if (h == MAP_FAILED) {
        int e = rc ? rc : errno;
        unlinkat(rfd, tmp, 0);
        close(fd);
        rs_disable(e == ENOSPC ? "cannot create the trace header: the disk is full"
                               : "cannot map the trace header",
                   e);
        return -1;
    }
    rs_w_hot.hdr = h;
    init_header(run_dir);
    int err = publish_name(rfd, tmp, file, cap);
    if (err) {
        unlinkat(rfd, tmp, 0);
        munmap(h, RS_HEADER_SIZE);
        rs_w_hot.hdr = NULL;
        close(fd);
        rs_disable("cannot name the trace file", err);
        return -1;
    }
    snprintf(g_w.path, sizeof g_w.path, "%s/%s/%s", out, run_dir, file);
    struct stat fst;
    if (fstat(fd, &fst) == 0) {
        g_w.dev = fst.st_dev;
        g_w.ino = fst.st_ino;
    }
    int hi = fcntl(fd, F_DUPFD_CLOEXEC, RS_FD_FLOOR);
    if (hi >= 0) {
        close(fd);
        fd = hi;
    }
    g_w.fd = fd;
    return 0;
}

/* Fill the mapped header (rs_w_hot.hdr) and the chunk limits. The file stays
 * within RECOMPSHIM_MAX_BYTES (whole chunks; at least the header and two
 * chunks, 516 KiB): events fill all but the reserved tail. */
static void
init_header(const char *run_dir)
{
    uint64_t max_chunks = UINT32_MAX - 1, tail = 0;
    if (g_rs_cfg.max_bytes) {
        uint64_t n = g_rs_cfg.max_bytes > RS_HEADER_SIZE
                         ? (g_rs_cfg.max_bytes - RS_HEADER_SIZE) / RS_CHUNK_SIZE
                         : 0;
        if (n < 2)
            n = 2;
        tail = n / 8;
        if (tail < 1)
            tail = 1;
        if (tail > RS_RESERVED_TAIL_MAX)
            tail = RS_RESERVED_TAIL_MAX;
        max_chunks = n;
    }
    g_w.max_chunks = (uint32_t)max_chunks;
    g_w.limit_chunks = (uint32_t)(max_chunks - tail);
    atomic_store(&g_w.next_chunk, 0);
    atomic_store(&g_w.returned_chunks, 0);
    atomic_store(&g_w.returned_bytes, 0);
    __atomic_store_n(&rs_w_hot.limit_hit, 0, __ATOMIC_SEQ_CST);
    rs_header_fill(rs_w_hot.hdr, run_dir);
    rs_w_hot.hdr->reserved_chunks = (uint32_t)tail;
    /* The checksum covers the magic as it will read. Magic last: a reader
     * never sees a half-written header as valid. */
    rs_file_header sum;
    memcpy(&sum, rs_w_hot.hdr, sizeof sum);
    memcpy(sum.magic, RS_TRACE_MAGIC, RS_TRACE_MAGIC_LEN);
    rs_w_hot.hdr->header_checksum = rs_header_checksum(&sum);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    memcpy(rs_w_hot.hdr->magic, RS_TRACE_MAGIC, RS_TRACE_MAGIC_LEN);
}

/* Create the run directory and the trace file; map the header. */
static int
create_file(void)
{
    const char *out = g_rs_cfg.out_dir;
    char run_dir[128], file[256];
    rs_trace_names(run_dir, sizeof run_dir, file, sizeof file);
    if (path_refused(out, run_dir, file))
        return -1;
    int rfd = open_run_dir(out, run_dir);
    if (rfd < 0)
        return -1;
    int rc = create_trace(rfd, out, run_dir, file, sizeof file);
    close(rfd);
    return rc;
}

int
rs_trace_open_slow(void)
{
    int s = rs_writer_state();
    if (__builtin_expect(s == RS_W_OPEN, 1))
        return 1;
    if (s != RS_W_NONE)
        return 0;
    t_rs.guard++;
    pthread_mutex_lock(&g_w.open_mu);
    int ok = 0, created = 0;
    s = rs_writer_state();
    if (s == RS_W_OPEN) {
        ok = 1;
    } else if (s == RS_W_NONE && create_file() == 0) {
        __atomic_fetch_add(&rs_w_hot.gen, 1, __ATOMIC_SEQ_CST);
        __atomic_store_n(&rs_w_hot.state, RS_W_OPEN, __ATOMIC_RELEASE);
        rs_header_write_startup_records();
        rs_intern_replay();
        rs_pystack_replay();
        rs_nvtx_replay_definitions();
        rs_log(1, "tracing to %s", g_w.path);
        ok = created = 1;
    }
    pthread_mutex_unlock(&g_w.open_mu);
    if (created)
        rs_pystack_schedule(); /* Python frames: installed later, with the GIL */
    t_rs.guard--;
    return ok;
}

/* Move the writer from OPEN to CLOSED (once: 0 when another caller did)
 * and seal every chunk still registered as active. Async-signal-safe: one
 * compare-and-swap and the seals (no lock, no allocation), so both the
 * clean exit and the _exit hook (rs_writer_exit) use it. */
static int
close_and_seal_all(void)
{
    int expect = RS_W_OPEN;
    if (!__atomic_compare_exchange_n(&rs_w_hot.state, &expect, RS_W_CLOSED, 0, __ATOMIC_SEQ_CST,
                                     __ATOMIC_SEQ_CST))
        return 0;
    for (int i = 0; i < RS_REGISTRY_SLOTS; i++) {
        unsigned char *c = atomic_load(&g_w.slots[i].chunk);
        if (c && atomic_load(&g_w.slots[i].state) == SLOT_ACTIVE)
            seal_chunk(c, i);
    }
    return 1;
}

void
rs_writer_close(void)
{
    if (rs_writer_state() != RS_W_OPEN)
        return;
    /* Objects loaded after the file was created (dlopen'ed plugins). */
    rs_modules_refresh();
    rs_window_report_at_exit();
    if (!close_and_seal_all())
        return;
    rs_w_hot.hdr->close_ns = rs_now_ns();
    __atomic_fetch_or(&rs_w_hot.hdr->flags, RS_HDR_CLOSED, __ATOMIC_RELEASE);
    msync(rs_w_hot.hdr, RS_HEADER_SIZE, MS_ASYNC);
}

int
rs_writer_before_exec(const char *program)
{
    if (rs_writer_state() != RS_W_OPEN || !rs_w_hot.hdr || rs_w_hot.hdr->pid != (int32_t)getpid())
        return 0;
    char note[PATH_MAX + 16];
    int n = snprintf(note, sizeof note, "exec %s", program ? program : "?");
    if (n > 0)
        rs_record_meta(RS_META_NOTE, note, strlen(note));
    rs_writer_close();
    return 1;
}

/* _exit and _Exit run no destructor, so rs_writer_close never runs. This
 * is its async-signal-safe part: no lock (a child forked while another
 * thread held one of the shim's may have inherited it; a signal handler
 * may call _exit inside a hook), no allocation, no dl_iterate_phdr (the
 * MODULE refresh of a clean exit is skipped: objects loaded since the
 * last chunk claim or OOM stay unnamed), no record (a record may need a
 * new chunk: fallocate, mmap, locks). The exit fields are written before
 * RS_HDR_CLOSED is published, so a reader that sees the flag sees them.
 * Takes no lock, so the lock order (below) is unchanged. */
void
rs_writer_exit(int via, int status)
{
    if (rs_writer_state() != RS_W_OPEN || !rs_w_hot.hdr || rs_w_hot.hdr->pid != (int32_t)getpid())
        return;
    if (!close_and_seal_all())
        return;
    rs_header_exit *x = (rs_header_exit *)(void *)((unsigned char *)rs_w_hot.hdr +
                                                   RS_HEADER_EXIT_OFFSET);
    x->status = status;
    x->via = (uint32_t)via;
    rs_w_hot.hdr->close_ns = rs_now_ns();
    __atomic_fetch_or(&rs_w_hot.hdr->flags, RS_HDR_CLOSED, __ATOMIC_RELEASE);
}

/* Drop the current file's mappings and descriptor: the next CUDA call
 * creates a new file. Shared by fork children and failed execs. */
static void
writer_reset(void)
{
    for (int i = 0; i < RS_REGISTRY_SLOTS; i++) {
        unsigned char *c = atomic_load(&g_w.slots[i].chunk);
        if (c)
            munmap(c, RS_CHUNK_SIZE);
        atomic_store(&g_w.slots[i].chunk, NULL);
        atomic_store(&g_w.slots[i].state, SLOT_FREE);
    }
    if (rs_w_hot.hdr)
        munmap(rs_w_hot.hdr, RS_HEADER_SIZE);
    if (g_w.fd >= 0)
        close(g_w.fd);
    rs_w_hot.hdr = NULL;
    g_w.fd = -1;
    g_w.path[0] = '\0';
    __atomic_store_n(&rs_w_hot.state, RS_W_NONE, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&rs_w_hot.gen, 1, __ATOMIC_SEQ_CST);
    t_rs.chunk = NULL;
    t_slot = -1;
}

void
rs_writer_after_failed_exec(void)
{
    if (rs_writer_state() == RS_W_CLOSED)
        writer_reset();
}

/* The shim's one lock order, outermost first. A thread may take a lock
 * only while it holds none ranked at or below it (docs/reliability.md):
 *   1 g_w.open_mu         file creation (rs_trace_open; writes the startup
 *                         records, replays the intern table: takes 3, 4, 5)
 *   2 NVTX registry lock  domains and registered strings (interns: 3)
 *   3 intern table lock   a new string (writes its record: 4, 5, 6)
 *   4 module list lock    MODULE records at chunk claims (claims: 5)
 *   5 g_w.fd_mu           reopening a trace descriptor the job closed
 *   6 NVTX stack pool     a thread's range stack (leaf)
 *   7 Python stack table  a new code object or call stack (shim/pystack.c;
 *                         leaf: held for the table insert only)
 * fork() runs the prepare handler below, which takes all seven in this
 * order, so a fork never waits for a lock while holding one ranked below
 * it (the deadlock of #11: prepare took 3 then 1 while rs_trace_open held
 * 1 and waited for 3). The child holds them all: it re-initialises them,
 * the parent releases them. */
static void
atfork_prepare(void)
{
    pthread_mutex_lock(&g_w.open_mu);
    rs_nvtx_atfork_prepare();
    rs_intern_atfork_prepare();
    rs_modules_atfork_prepare();
    pthread_mutex_lock(&g_w.fd_mu);
    rs_nvtx_atfork_prepare_leaf();
    rs_pystack_atfork_prepare();
}

static void
atfork_parent(void)
{
    rs_pystack_atfork_parent();
    rs_nvtx_atfork_parent();
    pthread_mutex_unlock(&g_w.fd_mu);
    rs_modules_atfork_parent();
    rs_intern_atfork_parent();
    pthread_mutex_unlock(&g_w.open_mu);
}

/* The child gets a fresh writer: no file until it touches CUDA itself.
 * The parent's mappings are dropped from the child, never written. */
static void
atfork_child(void)
{
    pthread_mutex_init(&g_w.open_mu, NULL);
    pthread_mutex_init(&g_w.fd_mu, NULL);
    rs_intern_atfork_child();
    rs_modules_atfork_child();
    rs_nvtx_atfork_child();
    rs_pystack_atfork_child();
    if (rs_writer_state() == RS_W_OPEN)
        writer_reset();
    __atomic_fetch_add(&rs_w_hot.gen, 1, __ATOMIC_SEQ_CST);
    t_rs.chunk = NULL;
    t_rs.tid = 0;
    t_slot = -1;
}

void
rs_writer_init(void)
{
    if (g_rs_cfg.disable)
        __atomic_store_n(&rs_w_hot.state, RS_W_DISABLED, __ATOMIC_SEQ_CST);
    rs_clock_init();
    rs_record_init();
    pthread_key_create(&g_w.exit_key, thread_exit);
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}
