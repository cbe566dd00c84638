/* abuild.h: hand-made traces for the analyzer tests, on top of
 * tests/unit/trace_builder (format structs written directly), plus running
 * recomp-analyze and reading its JSON.
 *
 * Times are ns since the trace start (the builder's mono_start_ns is added).
 * The main thread is tid AB_MAIN (= the header pid, so it has the main role).
 */
#ifndef ABUILD_H
#define ABUILD_H

#include <stddef.h>
#include <stdint.h>
#include <yajl/yajl_tree.h>

#include "recomp/trace_format.h"
#include "trace_builder.h"

#define AB_MAIN 4242u
#define AB_BWD 4243u

typedef struct ab {
    tb_trace *tb;
    uint32_t tids[16];
    uint32_t chunks[16];
    int nthreads;
} ab;

ab *ab_new(void);
/* Header fields. */
void ab_rank(ab *a, int rank, int world);
void ab_job(ab *a, const char *torchelastic_run_id);
void ab_mode(ab *a, uint32_t mode);
/* META cmdline from a NULL-terminated argv. */
void ab_cmdline(ab *a, uint64_t t, const char *const *argv);
void ab_thread(ab *a, uint32_t tid, uint64_t t, const char *name);
void ab_push(ab *a, uint32_t tid, uint64_t t, const char *name);
void ab_pop(ab *a, uint32_t tid, uint64_t t);
void ab_mark(ab *a, uint32_t tid, uint64_t t, const char *name);
void ab_alloc(ab *a, uint32_t tid, uint64_t t, uint64_t ptr, uint64_t size);
void ab_alloc_api(ab *a, uint32_t tid, uint64_t t, uint64_t ptr, uint64_t size, uint16_t api,
                  uint8_t mem);
void ab_free(ab *a, uint32_t tid, uint64_t t, uint64_t ptr);
void ab_oom(ab *a, uint32_t tid, uint64_t t, uint64_t size, uint64_t free_b, uint64_t total,
            const uint64_t *frames, uint32_t nframes);
void ab_meminfo(ab *a, uint32_t tid, uint64_t t, uint64_t free_b, uint64_t total);
#if RS_TRACE_VERSION_MINOR >= 1
void ab_tensor(ab *a, uint32_t tid, uint64_t t, uint64_t ptr, int64_t size, uint64_t total_alloc,
               uint64_t total_reserved);
void ab_coll(ab *a, uint32_t tid, uint64_t t, uint32_t op, uint64_t bytes);
#endif
/* The header, for fields without a helper (run_id, restart_count, limit,
 * window, host, ...). */
rs_file_header *ab_header(ab *a);
/* A WINDOW record (state RS_WINDOW_OPEN/CLOSE), a META note, a MODULE. */
void ab_window(ab *a, uint64_t t, uint32_t state, uint32_t kind, uint64_t value);
void ab_note(ab *a, uint64_t t, const char *text);
void ab_module(ab *a, uint64_t t, uint64_t lo, uint64_t hi, const char *path);

/* A META env record ("NAME=value"). */
void ab_env(ab *a, uint64_t t, const char *name_value);
#if RS_TRACE_VERSION_MINOR >= 1
/* A VMM record of kind RS_REC_VMM_CREATE (api cuMemCreate) or
 * RS_REC_VMM_RELEASE (cuMemRelease) on device 0, from caller. */
void ab_vmm(ab *a, uint32_t tid, uint64_t t, uint16_t kind, uint64_t handle, uint64_t size,
            uint64_t caller, int32_t status);
#endif
/* An OOM record of api (rs_api) from caller, no frames. */
void ab_oom_api(ab *a, uint32_t tid, uint64_t t, uint64_t size, uint64_t free_b, uint64_t total,
                uint16_t api, uint64_t caller);

/* Write to path (closed or not); frees the builder. Returns the length. */
size_t ab_write(ab *a, const char *path, int closed);

/* A fresh temp dir (malloc'd path). */
char *ab_tmpdir(void);
/* Keeps p (malloc'd) reachable until the test process ends; returns p. */
char *ab_keep(char *p);

/* Run recomp-analyze with args (NULL-terminated, without argv[0]); stdout
 * and stderr into *out / *err (malloc'd). Returns the exit status. */
int ab_run(const char *const *args, char **out, char **err);

/* Parse JSON text; NULL when it does not parse. */
yajl_val ab_json(const char *text);
/* Navigate "ranks[0].peak.bytes". NULL when absent. */
yajl_val ab_get(yajl_val v, const char *path);
long long ab_int(yajl_val root, const char *path);      /* aborts the test if absent */
const char *ab_str(yajl_val root, const char *path);    /* "" if absent / not a string */
int ab_is_null(yajl_val root, const char *path);

/* Index of the contributor with phase/boundary/layer (0 = null) in
 * peak at `peak_path` ("ranks[0].peak"), or -1. */
int ab_contrib(yajl_val root, const char *peak_path, const char *phase, const char *boundary,
               int layer);

#define AB_ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

#endif
