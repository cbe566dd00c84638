/* trace_reader.h: validating reader of recompshim trace files (format v1).
 *
 * Opening a trace maps it read-only (never copies it to the heap), checks
 * the file header and every published chunk header, then walks every record
 * once to validate it and to collect the definitions (interned strings,
 * NVTX domains, thread names, module map, META records). Memory held by a
 * reader grows with the number of chunks and definitions, not of events.
 *
 * Events are then read in time order with an iterator that merges the
 * per-thread chunk streams by t_ns (ties: chunk index, then position).
 *
 * Errors: every failure is reported as one line
 *     FILE: offset N: what was wrong
 * where N is the byte offset in the file of the damaged field or record.
 * Record errors also name the chunk, the record index in its chunk and the
 * kind. The reader never reads outside the file, whatever the input.
 *
 * Times are CLOCK_MONOTONIC nanoseconds as stored; sizes are bytes.
 * Pointers handed out (records, strings) point into the mapping and stay
 * valid until rs_reader_close. Strings from the trace are NOT NUL-terminated:
 * each comes with its length.
 */
#ifndef RECOMP_TRACE_READER_H
#define RECOMP_TRACE_READER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "recomp/trace_format.h"

typedef struct rs_reader rs_reader;
typedef struct rs_iter rs_iter;

/* Result codes of rs_reader_open / rs_reader_open_mem. */
enum rs_read_status {
    RS_READ_OK = 0,
    RS_READ_ESYS = -1,     /* the file could not be opened, stat'ed or mapped */
    RS_READ_EFORMAT = -2,  /* the bytes are not a valid trace this reader accepts */
};

/* One event of the time-ordered iteration. */
typedef struct rs_event {
    /* The record (validated), in the mapping; a compact ALLOC_C/FREE_C
     * record (format 1.4) is handed out expanded into the full ALLOC/FREE
     * record it stands for, held by the iterator until its next call
     * (offset still names the compact record). SITE records are handed out
     * as they are. */
    const rs_record_header *rec;
    uint32_t tid;                /* writer thread (its chunk's tid) */
    uint32_t chunk_index;        /* index of the chunk holding it */
    uint32_t record_index;       /* 0-based position in that chunk */
    uint64_t offset;             /* byte offset of the record in the file */
} rs_event;

/* A MODULE record, decoded. */
typedef struct rs_module_info {
    uint64_t base;               /* load bias: offsets are addr - base */
    uint64_t lo, hi;             /* mapped range [lo, hi) */
    const uint8_t *build_id;     /* build_id_len bytes, may be 0 */
    uint32_t build_id_len;
    const char *path;            /* path_len bytes, not NUL-terminated */
    uint32_t path_len;
} rs_module_info;

/* Open and fully validate the trace at `path`.
 * On success stores a new reader in *out and returns RS_READ_OK. On failure
 * *out is NULL, returns RS_READ_ESYS or RS_READ_EFORMAT, and writes one
 * NUL-terminated line ("PATH: offset N: ...", or "PATH: cannot open: ..."
 * for system errors) into err[0..errlen) when err is not NULL.
 * Reads the whole file once (streaming through the mapping). A file still
 * being written is read up to what was published when it was opened. */
int rs_reader_open(const char *path, rs_reader **out, char *err, size_t errlen);

/* rs_reader_open with flags. RS_READ_SALVAGE: a chunk that does not check
 * out (bad chunk header, checksum mismatch, a damaged record) is skipped
 * instead of failing the file; each skip is a warning naming the chunk, its
 * offset and the damage, and a last warning starting "INCOMPLETE" counts
 * them (rs_reader_salvaged). Header damage still fails the file. */
#define RS_READ_SALVAGE 0x1u
int rs_reader_open_flags(const char *path, unsigned flags, rs_reader **out, char *err,
                         size_t errlen);

/* Chunks skipped by RS_READ_SALVAGE and the record bytes they held (as
 * their headers claim, at most a chunk's payload each). */
void rs_reader_salvaged(const rs_reader *r, uint32_t *chunks, uint64_t *bytes);

/* Same as rs_reader_open over `len` bytes at `data`, reported as `name`
 * (for tests and fuzzing). The bytes must stay valid and unchanged until
 * rs_reader_close (they are copied only if not 8-byte aligned). */
int rs_reader_open_mem(const void *data, size_t len, const char *name, rs_reader **out,
                       char *err, size_t errlen);

/* Release the reader, its mapping and everything it handed out. NULL ok. */
void rs_reader_close(rs_reader *r);

/* The file name given at open. */
const char *rs_reader_path(const rs_reader *r);

/* A copy of the file header as read at open (chunks_published and flags are
 * the values validated then). */
const rs_file_header *rs_reader_header(const rs_reader *r);

/* 1 when the header has RS_HDR_CLOSED (clean exit), else 0. */
int rs_reader_closed(const rs_reader *r);

/* (1.6) How the process left when the shim saw it leave: *via an enum
 * rs_exit_via (0: not seen: a clean exit through exit(), a trace not
 * closed, or a file before 1.6), *status the status it passed (0 when
 * *via is 0). */
void rs_reader_exit(const rs_reader *r, int *via, int *status);
/* "_exit", "_Exit", or NULL for RS_EXIT_NONE and unknown values. */
const char *rs_exit_via_name(uint32_t via);

/* Number of warnings found at open (not closed, unclaimed chunks, ...),
 * and the i-th one as a NUL-terminated line "PATH: ...", or NULL. */
size_t rs_reader_warning_count(const rs_reader *r);
const char *rs_reader_warning(const rs_reader *r, size_t i);

/* Number of valid (initialised) chunks and of records validated at open. */
uint32_t rs_reader_chunk_count(const rs_reader *r);
uint64_t rs_reader_record_count(const rs_reader *r);

/* The last error line of this reader (set when an iterator fails), or "". */
const char *rs_reader_error(const rs_reader *r);

/* ---- time-ordered iteration ---- */

/* A new iterator over all records of `r` in time order, or NULL when out of
 * memory. Several iterators may run over one reader. */
rs_iter *rs_iter_new(rs_reader *r);

/* Store the next event in *ev. Returns 1 when an event was stored, 0 at the
 * end, -1 on an error (the file changed under the reader): the message is
 * then in rs_reader_error. */
int rs_iter_next(rs_iter *it, rs_event *ev);

/* Release an iterator. NULL ok. */
void rs_iter_free(rs_iter *it);

/* Signed nanoseconds of `t_ns` since the header's mono_start_ns. */
int64_t rs_reader_rel_ns(const rs_reader *r, uint64_t t_ns);

/* ---- definitions collected at open ---- */

/* Text of interned string `id` in *text and *len; returns 1 if known, else 0.
 * When an id is defined twice the last definition in the file wins. */
int rs_reader_string(const rs_reader *r, uint32_t id, const char **text, uint32_t *len);

/* (1.3) Python stack `id` (a PYSTACK record): its innermost frame (a
 * PYFRAME id) and the stack it was called from (0: the outermost frame the
 * shim saw). Returns 1 if known, else 0 (also for id 0, "no stack").
 * Parents are always below their child's id (checked at open), so walking
 * parents ends. */
int rs_reader_pystack(const rs_reader *r, uint32_t id, uint32_t *parent, uint32_t *frame);

/* (1.3) A Python frame: qualified name, file (not NUL-terminated; "?" when
 * not interned) and first line of its code object. */
typedef struct rs_pyframe_info {
    const char *name, *file;
    uint32_t name_len, file_len;
    uint32_t line;
} rs_pyframe_info;
/* Frame `id` into *out; 1 if known, else 0. */
int rs_reader_pyframe(const rs_reader *r, uint32_t id, rs_pyframe_info *out);

/* Name of NVTX domain `id` (from its NVTX_DOMAIN record, via the string
 * table or inline text); returns 1 if known, else 0 (also for id 0, the
 * default domain, which has no record). */
int rs_reader_domain(const rs_reader *r, uint32_t id, const char **name, uint32_t *len);

/* Name (NUL-terminated, at most 15 chars) of thread `tid`: the latest (by
 * t_ns) THREAD record for that tid, or a later rename recorded with tid 0
 * and the same pthread. Returns NULL when the thread has no name. */
const char *rs_reader_thread_name(const rs_reader *r, uint32_t tid);

/* The latest name recorded for pthread_t value `pthread`, or NULL. */
const char *rs_reader_thread_name_by_pthread(const rs_reader *r, uint64_t pthread);

/* META records in file order: count, and the i-th one's key and value. */
size_t rs_reader_meta_count(const rs_reader *r);
int rs_reader_meta(const rs_reader *r, size_t i, uint32_t *key, const char **value,
                   uint32_t *len);

/* MODULE records: count, i-th (in file order), and the module whose range
 * [lo, hi) holds `addr` (the latest recorded one when several do), or NULL. */
size_t rs_reader_module_count(const rs_reader *r);
const rs_module_info *rs_reader_module(const rs_reader *r, size_t i);
const rs_module_info *rs_reader_find_module(const rs_reader *r, uint64_t addr);

/* Write "BASENAME+0xOFF" (offset = addr - module base) for `addr` into
 * buf[0..n). Returns 1 when addr is in a known module, else 0 and buf = "". */
int rs_reader_format_addr(const rs_reader *r, uint64_t addr, char *buf, size_t n);

/* ---- names from the format's lists ---- */

/* "cudaMalloc" for an API code, "none" for 0, NULL for an unknown code. */
const char *rs_api_name(uint32_t code);
/* "ALLOC" for a record kind code, NULL for an unknown code. */
const char *rs_kind_name(uint32_t kind);
/* Fixed size in bytes (header included) of a kind's struct, 0 if unknown. */
uint32_t rs_kind_fixed_size(uint32_t kind);
/* "device" / "host_pinned" / "managed", NULL if out of range. */
const char *rs_mem_name(uint32_t mem);
/* "app" / "sample" / "oom", NULL if out of range. */
const char *rs_meminfo_reason_name(uint32_t reason);
/* "cmdline", "env", "nvtx_owner", "hook_missing", "exe", "note",
 * (v1.1) "unwinder", "tensors"; NULL for unknown keys. */
const char *rs_meta_key_name(uint32_t key);
#if RS_TRACE_VERSION_MINOR >= 1
/* GRAPH op (aux) name: "begin_capture", "end_capture", "is_capturing",
 * "instantiate", "launch"; NULL if out of range. */
const char *rs_graph_op_name(uint32_t op);
/* COLLECTIVE op (aux) name: "all_reduce", "reduce_scatter", ...,
 * "comm_destroy"; NULL if out of range. */
const char *rs_coll_op_name(uint32_t op);
#endif
/* "none", "time", "events", "steps", NULL. */
const char *rs_window_kind_name(uint32_t kind);
/* "none", "torchrun", "ompi", "slurm", "pmi", NULL. */
const char *rs_rank_source_name(uint32_t src);
/* "default", "async", "nocache", NULL. */
const char *rs_mode_name(uint32_t mode);

/* Write `len` bytes as C-escaped text (\" \\ \n \t \r, other non-printable
 * bytes as \xNN) to f. Used by recomp-dump for every string it prints. */
void rs_fput_escaped(FILE *f, const char *s, size_t len);

#endif
