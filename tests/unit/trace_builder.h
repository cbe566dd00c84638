/* trace_builder.h: hand-built recompshim traces for tests (no shim needed).
 *
 * Lays out bytes exactly as include/recomp/trace_format.h says: a file
 * header of header_size bytes, then chunks of chunk_size bytes, each an
 * rs_chunk_header followed by records. Tests fill a record struct, append
 * it with tb_put, then tweak bytes at the returned offsets to make corrupt
 * files.
 */
#ifndef RECOMP_TRACE_BUILDER_H
#define RECOMP_TRACE_BUILDER_H

#include <stddef.h>
#include <stdint.h>

#include "recomp/trace_format.h"

typedef struct tb_trace {
    unsigned char *buf;       /* header_size + max_chunks * chunk_size bytes */
    size_t cap;
    uint32_t chunk_size;
    uint32_t max_chunks;
    uint32_t nchunks;         /* chunks created (chunks_published at tb_finish) */
} tb_trace;

/* A new trace with a v1.0 header (mono_start_ns = 1000000, pid 4242, host
 * "node1", rank fields -1, device 0) and room for max_chunks chunks of
 * chunk_size bytes (0 = RS_CHUNK_SIZE). Aborts on out of memory. */
tb_trace *tb_new(uint32_t chunk_size, uint32_t max_chunks);
void tb_free(tb_trace *t);

/* The file header, to edit fields before tb_finish. */
rs_file_header *tb_header(tb_trace *t);

/* Start a new chunk owned by `tid`; returns its index. */
uint32_t tb_chunk(tb_trace *t, uint32_t tid);

/* The header of chunk `index`. */
rs_chunk_header *tb_chunk_header(tb_trace *t, uint32_t index);

/* File offset of chunk `index`. */
uint64_t tb_chunk_offset(const tb_trace *t, uint32_t index);

/* Append a record to chunk `index`: `fixed` bytes of its struct (whose
 * header's kind, aux and t_ns the caller set; size is computed) then `var`
 * bytes, padded to 8. Returns the record's file offset. Aborts when the
 * chunk is full. */
uint64_t tb_put(tb_trace *t, uint32_t index, const void *fixed, size_t fixed_len,
                const void *var, size_t var_len);

/* Seal chunk `index`: checksum over its used bytes. */
void tb_seal(tb_trace *t, uint32_t index);

/* Set chunks_published = chunks created, and RS_HDR_CLOSED when closed.
 * Returns the file length (header + published chunks). */
size_t tb_finish(tb_trace *t, int closed);

/* Write the first len bytes to `path` (0 ok, -1 error). */
int tb_write(const tb_trace *t, const char *path, size_t len);

/* A fresh temporary file path "/tmp/rs-test-XXXXXX" (created empty), to be
 * released with free() (and unlink()ed by the caller). */
char *tb_tmpname(void);

#endif
