/* test_prefault.c: the writer's chunk pre-faulting, both ways.
 *
 * A claimed chunk is zero-filled (pwritev) and made writable with
 * madvise(MADV_POPULATE_WRITE); kernels before 5.14 answer EINVAL and the
 * writer touches each page itself. GIVEN a seccomp filter that makes
 * MADV_POPULATE_WRITE fail with EINVAL (as an old kernel does), or none,
 * WHEN 4 threads write 2 x 20000 records each (many chunks), THEN the real
 * reader finds every record, every chunk sealed, no warning. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "config.h"
#include "record.h"
#include "trace_reader.h"
#include "writer.h"

/* The writer calls these NVTX hooks; the NVTX module is not linked here. */
void rs_nvtx_replay_definitions(void) {}
void rs_nvtx_thread_attach(void) {}
void rs_nvtx_setup_env(void) {}
const char *rs_nvtx_foreign_path(void) { return NULL; }
void rs_nvtx_atfork_prepare(void) {}
void rs_nvtx_atfork_prepare_leaf(void) {}
void rs_nvtx_atfork_parent(void) {}
void rs_nvtx_atfork_child(void) {}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static char g_dir[256];

static void
setup(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/rs-prefault-XXXXXX");
    cr_assert_not_null(mkdtemp(g_dir));
    setenv("RECOMPSHIM_OUT", g_dir, 1);
    unsetenv("RECOMPSHIM_RUN_ID");
    unsetenv("RECOMPSHIM_MAX_BYTES");
    unsetenv("RECOMPSHIM_WINDOW");
    setenv("RECOMPSHIM_MEMINFO_MS", "0", 1);
    rs_config_load();
    rs_writer_init();
}

/* Make madvise(..., MADV_POPULATE_WRITE) fail with EINVAL in this process
 * and its threads (seccomp-bpf, seccomp(2)); everything else is allowed. */
static void
deny_populate_write(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_madvise, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, MADV_POPULATE_WRITE, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EINVAL & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof f / sizeof f[0], f};
    /* a sandbox that forbids seccomp filters cannot run this test: say so */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        cr_skip_test("seccomp filters unavailable here (%s): fallback not tested", strerror(errno));
    /* the filter is in force: an old kernel's answer */
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(p, MAP_FAILED);
    errno = 0;
    cr_assert_eq(madvise(p, 4096, MADV_POPULATE_WRITE), -1);
    cr_assert_eq(errno, EINVAL);
    munmap(p, 4096);
}

static void
find_trace(char *out, size_t cap)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "ls %s/*/*.rstrace", g_dir);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    cr_assert_not_null(fgets(out, (int)cap, f), "no trace under %s", g_dir);
    out[strcspn(out, "\n")] = '\0';
    pclose(f);
}

enum { THREADS = 4, PER = 40000 }; /* 6.4 MB of packed records (1.5): 25+ chunks */

static void *
worker(void *p)
{
    int index = (int)(intptr_t)p;
    for (int i = 0; i < PER; i++) {
        uint64_t ptr = 0x7e0000000000ull + ((uint64_t)index << 32) + (uint64_t)i * 512;
        rs_record_alloc(RS_API_cudaMalloc, RS_MEM_DEVICE, ptr, 512, 0, 0, 0);
        rs_record_free(RS_API_cudaFree, RS_MEM_DEVICE, ptr, 0, 0, 0);
    }
    return NULL;
}

static void
write_and_check(void)
{
    cr_assert_eq(rs_trace_open(), 1);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    rs_writer_close();
    char path[512], err[512];
    find_trace(path, sizeof path);
    rs_reader *r = NULL;
    cr_assert_eq(rs_reader_open(path, &r, err, sizeof err), RS_READ_OK, "reader: %s", err);
    uint64_t allocs = 0, frees = 0, bytes = 0;
    rs_iter *it = rs_iter_new(r);
    rs_event ev;
    while (rs_iter_next(it, &ev) == 1) {
        if (ev.rec->kind == RS_REC_ALLOC) {
            allocs++;
            bytes += ((const rs_rec_alloc *)ev.rec)->size;
        }
        frees += ev.rec->kind == RS_REC_FREE;
    }
    rs_iter_free(it);
    cr_assert_eq(allocs, (uint64_t)THREADS * PER);
    cr_assert_eq(frees, (uint64_t)THREADS * PER);
    cr_assert_eq(bytes, (uint64_t)THREADS * PER * 512);
    cr_assert_geq(rs_reader_chunk_count(r), 25);
    cr_assert_eq(rs_reader_closed(r), 1);
    cr_assert_eq(rs_reader_warning_count(r), 0, "warning: %s", rs_reader_warning(r, 0));
    rs_reader_close(r);
}

Test(prefault, populate_write)
{
    setup();
    write_and_check();
}

Test(prefault, fallback_when_the_kernel_lacks_populate_write)
{
    setup();
    deny_populate_write();
    write_and_check();
}
