/* writer.h: the trace file, its chunks, and per-thread record slots. */
#ifndef RECOMPSHIM_WRITER_H
#define RECOMPSHIM_WRITER_H

#include <stdint.h>

#include "record.h"

enum rs_writer_state {
    RS_W_NONE = 0,     /* no file yet: the process has not touched CUDA */
    RS_W_OPEN = 1,     /* recording into the file */
    RS_W_DISABLED = 2, /* rs_disable was called, or RECOMPSHIM_DISABLE */
    RS_W_CLOSED = 3,   /* clean exit done */
};

/* Record classes: gated records obey the byte limit and the window;
 * ungated ones (definitions, thread names, OOM, LIMIT) always land, using
 * the reserved tail past the limit. */
enum rs_rec_class { RS_GATED = 0, RS_UNGATED = 1 };

/* Constructor-time setup: TLS key for thread exit, fork handlers. */
RS_HIDDEN void rs_writer_init(void);
_Static_assert(RS_W_NONE == 0 && RS_W_OPEN == 1, "rs_enabled and rs_trace_open (record.h) test these values");

/* Current state (acquire load). */
static inline int
rs_writer_state(void)
{
    return __atomic_load_n(&rs_w_hot.state, __ATOMIC_ACQUIRE);
}
RS_HIDDEN void rs_writer_set_disabled(void);

/* Reserve `size` bytes (a multiple of 8, <= RS_MAX_RECORD_SIZE) in the
 * calling thread's chunk; returns NULL when the record must be dropped (no
 * file, limit reached for a gated record, tail exhausted). The caller fills
 * the record and calls rs_rec_end with the same size. Lock-free; claims a
 * new chunk (fallocate + mmap, once per RS_CHUNK_SIZE) when full. */
RS_HIDDEN void *rs_rec_begin(uint32_t size, int cls);
/* rs_rec_begin's common case inline (the file open, a gated record below
 * the limit or an ungated one, this thread's chunk current and with room):
 * four loads and a compare, no call; anything else takes rs_rec_begin. */
static inline __attribute__((always_inline)) void *
rs_rec_begin_fast(uint32_t size, int cls)
{
    unsigned char *c = t_rs.chunk;
    if (__builtin_expect(
            c && __atomic_load_n(&rs_w_hot.state, __ATOMIC_ACQUIRE) == RS_W_OPEN &&
                !(cls == RS_GATED && __atomic_load_n(&rs_w_hot.limit_hit, __ATOMIC_RELAXED)) &&
                t_rs.gen == __atomic_load_n(&rs_w_hot.gen, __ATOMIC_RELAXED),
            1)) {
        uint32_t used = ((const rs_chunk_header *)(const void *)c)->used;
        if (__builtin_expect(used + size <= RS_CHUNK_PAYLOAD, 1))
            return c + sizeof(rs_chunk_header) + used;
    }
    return rs_rec_begin(size, cls);
}
/* Publish the record: release-store of the chunk's used count. rec must
 * start with an rs_record_header (its t_ns becomes the chunk's time base
 * for compact records, trace_format.h v1.4). */
RS_HIDDEN void rs_rec_end(void *rec, uint32_t size);
/* Publish `nrec` records filling `size` bytes from rs_rec_begin's pointer
 * at once (a SITE and the compact record naming it are published together);
 * t_last_ns is the time of the last of them (the chunk's time base after
 * them). */
static inline void
rs_rec_end_n(uint32_t size, uint32_t nrec, uint64_t t_last_ns)
{
    rs_chunk_header *ch = (rs_chunk_header *)(void *)t_rs.chunk;
    uint32_t used = ch->used + size;
    t_rs.ct_ns = t_last_ns;
    t_rs.ct_epoch = t_rs.chunk_epoch;
    __atomic_store_n(&ch->used, used, __ATOMIC_RELEASE);
    __atomic_store_n(&ch->record_count, ch->record_count + nrec, __ATOMIC_RELEASE);
}

/* The mapped file header, or NULL when no file is open. */
RS_HIDDEN rs_file_header *rs_writer_header(void);
/* Set header flag bits atomically. */
RS_HIDDEN void rs_writer_set_flags(uint32_t flags);
/* Flush the calling thread's chunk and the header to the file (msync). */
RS_HIDDEN void rs_writer_sync(void);
/* Clean exit: seal every active chunk, set RS_HDR_CLOSED. */
RS_HIDDEN void rs_writer_close(void);
/* The process is about to exec: close the trace as at a clean exit (the
 * new program starts its own file), with a META note naming the program.
 * Does nothing in a vfork child (it shares the parent's memory: the trace
 * is the parent's). Returns 1 when it closed the trace. */
RS_HIDDEN int rs_writer_before_exec(const char *program);
/* The exec failed: drop the closed file; the next CUDA call starts a new
 * one (numbered, the pid's name being taken). */
RS_HIDDEN void rs_writer_after_failed_exec(void);
/* The process leaves through _exit/_Exit (`via`, enum rs_exit_via, with
 * `status` as passed): no destructor will close the trace. Seal every
 * active chunk and close the trace as a clean end with how it left
 * (rs_header_exit, format 1.6). Async-signal-safe: atomics, the chunk
 * checksums, a clock read and getpid; no lock, no allocation, no loader
 * call, no MODULE refresh. Does nothing when the trace is not open or is
 * not this process's (a vfork child, a clone without fork handlers). */
RS_HIDDEN void rs_writer_exit(int via, int status);
/* Full path of the open trace, or "" (for log lines). */
RS_HIDDEN const char *rs_writer_path(void);
/* 1 once the byte limit has stopped gated records. */
RS_HIDDEN int rs_writer_limit_hit(void);
/* Count a gated record dropped because of the limit. */
RS_HIDDEN void rs_writer_count_dropped(void);

/* Provided by header.c: fill the header and write the startup records
 * (META, MODULE) into a freshly created file. */
RS_HIDDEN void rs_header_fill(rs_file_header *h, const char *run_dir_name);
RS_HIDDEN void rs_header_write_startup_records(void);
/* Provided by header.c: write MODULE records for objects loaded since the
 * last refresh (cheap when nothing was loaded). Called at each chunk claim,
 * at OOM and at exit; dl_iterate_phdr takes only the loader's list lock,
 * never the lock held while constructors run. */
RS_HIDDEN void rs_modules_refresh(void);
RS_HIDDEN void rs_modules_atfork_prepare(void);
RS_HIDDEN void rs_modules_atfork_parent(void);
RS_HIDDEN void rs_modules_atfork_child(void);
/* Provided by header.c: the run directory name and the file name. */
RS_HIDDEN void rs_trace_names(char *run_dir, size_t run_cap, char *file, size_t file_cap);

/* Provided by intern.c: re-emit STRING records at file creation. */
RS_HIDDEN void rs_intern_replay(void);
RS_HIDDEN void rs_intern_atfork_prepare(void);
RS_HIDDEN void rs_intern_atfork_parent(void);
RS_HIDDEN void rs_intern_atfork_child(void);

#endif
