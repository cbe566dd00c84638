/* test_corrupt.c: damaged traces give exit code 2 and one error line naming
 * the file and the byte offset, never a crash.
 *
 * Each test builds a valid trace (trace_builder.c), damages it at a known
 * offset, then checks both the reader API (RS_READ_EFORMAT and the message)
 * and recomp-dump (exit 2, "recomp-dump: FILE: offset N: ..." on stderr).
 * Record damage is re-sealed so the record check, not the checksum, fires.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_dump.h"
#include "trace_builder.h"
#include "trace_reader.h"

typedef struct base {
    tb_trace *t;
    size_t len;
    uint64_t string, alloc, meminfo, push, oom, meta, module, window, free_;
} base;

static base
build_base(void)
{
    base b = {0};
    b.t = tb_new(0, 3);
    tb_trace *t = b.t;
    uint32_t c = tb_chunk(t, 5);
    uint64_t ts = 1000100;
    rs_rec_string s = {.h = {.kind = RS_REC_STRING, .t_ns = ts++}, .id = 1, .len = 5};
    b.string = tb_put(t, c, &s, sizeof s, "hello", 5);
    rs_rec_alloc a = {.h = {.kind = RS_REC_ALLOC, .t_ns = ts++}, .ptr = 0x1000, .size = 512,
                      .api = RS_API_cudaMalloc};
    b.alloc = tb_put(t, c, &a, sizeof a, NULL, 0);
    rs_rec_meminfo m = {.h = {.kind = RS_REC_MEMINFO, .t_ns = ts++}, .free_bytes = 1,
                        .total_bytes = 2};
    b.meminfo = tb_put(t, c, &m, sizeof m, NULL, 0);
    rs_rec_nvtx_name p = {.h = {.kind = RS_REC_NVTX_PUSH, .aux = 1, .t_ns = ts++},
                          .text_len = 3};
    b.push = tb_put(t, c, &p, sizeof p, "fwd", 3);
    uint64_t frame = 0x4000;
    rs_rec_oom o = {.h = {.kind = RS_REC_OOM, .aux = 1, .t_ns = ts++}, .size = 1 << 30,
                    .api = RS_API_cudaMalloc, .status = 2, .meminfo_status = -1};
    b.oom = tb_put(t, c, &o, sizeof o, &frame, 8);
    rs_rec_meta me = {.h = {.kind = RS_REC_META, .t_ns = ts++}, .key = RS_META_NOTE, .len = 2};
    b.meta = tb_put(t, c, &me, sizeof me, "hi", 2);
    rs_rec_module mo = {.h = {.kind = RS_REC_MODULE, .t_ns = ts++}, .base = 0, .lo = 0x1000,
                        .hi = 0x9000, .build_id_len = 0, .path_len = 4};
    b.module = tb_put(t, c, &mo, sizeof mo, "/a.so", 4);
    rs_rec_window w = {.h = {.kind = RS_REC_WINDOW, .aux = RS_WINDOW_OPEN, .t_ns = ts++},
                       .window_kind = RS_WINDOW_TIME, .value = 9};
    b.window = tb_put(t, c, &w, sizeof w, NULL, 0);
    rs_rec_free f = {.h = {.kind = RS_REC_FREE, .t_ns = ts++}, .ptr = 0x1000,
                     .api = RS_API_cudaFree};
    b.free_ = tb_put(t, c, &f, sizeof f, NULL, 0);
    tb_seal(t, c);
    uint32_t c2 = tb_chunk(t, 6);
    rs_rec_set_device sd = {.h = {.kind = RS_REC_SET_DEVICE, .t_ns = ts++}, .device = 0};
    tb_put(t, c2, &sd, sizeof sd, NULL, 0);
    tb_seal(t, c2);
    b.len = tb_finish(t, 1);
    return b;
}

static unsigned char *
at(base *b, uint64_t off)
{
    return b->t->buf + off;
}

static void
set16(base *b, uint64_t off, uint16_t v)
{
    memcpy(at(b, off), &v, 2);
}

static void
set32(base *b, uint64_t off, uint32_t v)
{
    memcpy(at(b, off), &v, 4);
}

static uint64_t
chunk_off(base *b, uint32_t k)
{
    return tb_chunk_offset(b->t, k);
}

/* THEN: the reader refuses with "NAME: offset OFF: ...needle...", and
 * recomp-dump exits 2 with exactly one such line on stderr. */
static void
expect_corrupt(base *b, size_t len, uint64_t off, const char *needle)
{
    char err[640], prefix[256];
    rs_reader *r = (rs_reader *)1;
    int rc = rs_reader_open_mem(b->t->buf, len, "bad.trace", &r, err, sizeof err);
    cr_assert_eq(rc, RS_READ_EFORMAT, "rc %d", rc);
    cr_assert_null(r);
    snprintf(prefix, sizeof prefix, "bad.trace: offset %" PRIu64 ": ", off);
    cr_assert(!strncmp(err, prefix, strlen(prefix)), "want prefix '%s', got '%s'", prefix, err);
    cr_assert(strstr(err, needle), "want '%s' in '%s'", needle, err);

    char *path = tb_tmpname();
    cr_assert_eq(tb_write(b->t, path, len), 0);
    char *out, *e;
    rc = run_dump(RECOMP_DUMP_PATH, path, &out, &e);
    cr_assert_eq(rc, 2, "exit %d, stderr: %s", rc, e);
    snprintf(prefix, sizeof prefix, "recomp-dump: %s: offset %" PRIu64 ": ", path, off);
    cr_assert(!strncmp(e, prefix, strlen(prefix)), "want prefix '%s', got '%s'", prefix, e);
    cr_assert(strstr(e, needle), "want '%s' in '%s'", needle, e);
    char *nl = strchr(e, '\n');
    cr_assert(nl && nl[1] == '\0', "one line: '%s'", e);
    cr_assert_str_eq(out, "");
    free(out);
    free(e);
    unlink(path);
    free(path);
    tb_free(b->t);
}

/* Damage record fields then re-seal chunk 0 so only the record check fails. */
static void
reseal(base *b)
{
    tb_seal(b->t, 0);
}

/* Make b a file of format 1.`minor`: its sealed chunks carry that
 * version's chunk checksum (rs_chunk_checksum), its header is finished
 * again. */
static void
as_minor(base *b, uint16_t minor)
{
    tb_header(b->t)->version_minor = minor;
    for (uint32_t k = 0; k < b->t->nchunks; k++)
        if (tb_chunk_header(b->t, k)->flags & RS_CHUNK_SEALED)
            tb_seal(b->t, k);
    b->len = tb_finish(b->t, 1);
}

Test(corrupt, valid_base_reads)
{
    base b = build_base();
    rs_reader *r;
    char err[640];
    cr_assert_eq(rs_reader_open_mem(b.t->buf, b.len, "ok", &r, err, sizeof err), 0, "%s", err);
    cr_assert_eq(rs_reader_record_count(r), 10);
    rs_reader_close(r);
    tb_free(b.t);
}

Test(corrupt, truncated_file)
{
    base b = build_base();
    expect_corrupt(&b, 100, 0, "truncated file");
}

Test(corrupt, empty_file)
{
    base b = build_base();
    expect_corrupt(&b, 0, 0, "truncated file");
}

Test(corrupt, shorter_than_published_counts)
{
    base b = build_base();
    char want[200];
    snprintf(want, sizeof want, "file shorter than its published counts: 2 chunks of %u bytes "
             "need %zu bytes, the file has %zu", RS_CHUNK_SIZE, b.len, b.len - 1000);
    expect_corrupt(&b, b.len - 1000, offsetof(rs_file_header, chunks_published), want);
}

Test(corrupt, bad_magic)
{
    base b = build_base();
    at(&b, 0)[3] = 'X';
    expect_corrupt(&b, b.len, 0, "bad magic: not a recompshim trace");
}

Test(corrupt, newer_minor_version)
{
    base b = build_base();
    tb_header(b.t)->version_minor = RS_TRACE_VERSION_MINOR + 4;
    /* a real newer trace: its header checksum covers the version it states */
    tb_header(b.t)->header_checksum = rs_header_checksum(tb_header(b.t));
    char want[128];
    snprintf(want, sizeof want, "trace format version %u.%u is newer than this reader's %u.%u",
             RS_TRACE_VERSION_MAJOR, RS_TRACE_VERSION_MINOR + 4, RS_TRACE_VERSION_MAJOR,
             RS_TRACE_VERSION_MINOR);
    expect_corrupt(&b, b.len, offsetof(rs_file_header, version_minor), want);
}

Test(corrupt, newer_major_version)
{
    base b = build_base();
    tb_header(b.t)->version_major = RS_TRACE_VERSION_MAJOR + 1;
    tb_header(b.t)->version_minor = 0;
    tb_header(b.t)->header_checksum = rs_header_checksum(tb_header(b.t));
    char want[128];
    snprintf(want, sizeof want, "trace format version %u.0 cannot be read by this reader "
             "(format %u.%u)", RS_TRACE_VERSION_MAJOR + 1, RS_TRACE_VERSION_MAJOR,
             RS_TRACE_VERSION_MINOR);
    expect_corrupt(&b, b.len, offsetof(rs_file_header, version_major), want);
}

/* hnew finding 8: a damaged version byte (every bit of both version
 * fields that makes a version this reader refuses) is named as damage by
 * the header checksum, never as a newer format. */
Test(corrupt, flipped_version_bit_is_damage_not_a_newer_format)
{
    size_t tried = 0;
    for (size_t off = offsetof(rs_file_header, version_major);
         off < offsetof(rs_file_header, version_minor) + 2; off++)
        for (int bit = 0; bit < 8; bit++) {
            base b = build_base();
            at(&b, off)[0] ^= (uint8_t)(1u << bit);
            uint16_t major = tb_header(b.t)->version_major, minor = tb_header(b.t)->version_minor;
            if (major == RS_TRACE_VERSION_MAJOR && minor <= RS_TRACE_VERSION_MINOR) {
                tb_free(b.t); /* an older version: the checksum refuses it elsewhere */
                continue;
            }
            char want[160];
            snprintf(want, sizeof want, "damaged header: the version field reads %u.%u, but the "
                     "header checksum matches format %u.%u", major, minor,
                     RS_TRACE_VERSION_MAJOR, RS_TRACE_VERSION_MINOR);
            expect_corrupt(&b, b.len,
                           major != RS_TRACE_VERSION_MAJOR
                               ? offsetof(rs_file_header, version_major)
                               : offsetof(rs_file_header, version_minor),
                           want);
            tried++;
        }
    cr_expect_gt(tried, 10);
}

Test(corrupt, unknown_header_flag)
{
    base b = build_base();
    tb_header(b.t)->flags |= 0x100;
    expect_corrupt(&b, b.len, offsetof(rs_file_header, flags), "unknown header flags 0x100");
}

Test(corrupt, bad_header_size)
{
    base b = build_base();
    tb_header(b.t)->header_size = 12;
    expect_corrupt(&b, b.len, offsetof(rs_file_header, header_size), "header_size 12 invalid");
}

Test(corrupt, bad_chunk_size)
{
    base b = build_base();
    tb_header(b.t)->chunk_size = 1001;
    expect_corrupt(&b, b.len, offsetof(rs_file_header, chunk_size), "chunk_size 1001 invalid");
}

Test(corrupt, bad_header_mode)
{
    base b = build_base();
    tb_header(b.t)->mode = 9;
    expect_corrupt(&b, b.len, offsetof(rs_file_header, mode), "mode 9 out of range");
}

Test(corrupt, bad_chunk_magic)
{
    base b = build_base();
    tb_chunk_header(b.t, 1)->magic = 0x12345678;
    expect_corrupt(&b, b.len, chunk_off(&b, 1), "chunk 1: bad chunk magic 0x12345678");
}

Test(corrupt, bad_chunk_index)
{
    base b = build_base();
    tb_chunk_header(b.t, 1)->index = 7;
    expect_corrupt(&b, b.len, chunk_off(&b, 1) + offsetof(rs_chunk_header, index),
                   "chunk 1: header says index 7");
}

Test(corrupt, unknown_chunk_flag)
{
    base b = build_base();
    tb_chunk_header(b.t, 1)->flags |= 0x40;
    expect_corrupt(&b, b.len, chunk_off(&b, 1) + offsetof(rs_chunk_header, flags),
                   "unknown chunk flags 0x40");
}

Test(corrupt, chunk_used_beyond_payload)
{
    base b = build_base();
    tb_chunk_header(b.t, 1)->used = RS_CHUNK_SIZE;
    expect_corrupt(&b, b.len, chunk_off(&b, 1) + offsetof(rs_chunk_header, used),
                   "exceeds its payload");
}

Test(corrupt, checksum_mismatch)
{
    base b = build_base();
    at(&b, b.alloc + offsetof(rs_rec_alloc, size))[0] ^= 0x40; /* still a valid record */
    expect_corrupt(&b, b.len, chunk_off(&b, 0), "chunk 0: checksum mismatch");
}

Test(corrupt, unclaimed_chunk_in_closed_trace)
{
    base b = build_base();
    memset(tb_chunk_header(b.t, 1), 0, sizeof(rs_chunk_header));
    expect_corrupt(&b, b.len, chunk_off(&b, 1), "never initialised (magic 0) in a closed trace");
}

Test(corrupt, record_size_zero)
{
    base b = build_base();
    set16(&b, b.meminfo + offsetof(rs_record_header, size), 0);
    reseal(&b);
    expect_corrupt(&b, b.len, b.meminfo, "chunk 0 record 2 (MEMINFO): record size 0");
}

Test(corrupt, record_size_not_multiple_of_8)
{
    base b = build_base();
    set16(&b, b.meminfo + offsetof(rs_record_header, size), 44);
    reseal(&b);
    expect_corrupt(&b, b.len, b.meminfo,
                   "chunk 0 record 2 (MEMINFO): record size 44 is not a multiple of 8");
}

Test(corrupt, record_overruns_chunk)
{
    base b = build_base();
    set16(&b, b.free_ + offsetof(rs_record_header, size), 4096);
    reseal(&b);
    expect_corrupt(&b, b.len, b.free_, "record 8 (FREE): record size 4096 overruns the chunk");
}

Test(corrupt, record_smaller_than_fixed)
{
    base b = build_base();
    /* ALLOC of 16 bytes: the rest of its bytes then read as the next records */
    set16(&b, b.alloc + offsetof(rs_record_header, size), 16);
    reseal(&b);
    expect_corrupt(&b, b.len, b.alloc, "record size 16 is smaller than the fixed size 56");
}

Test(corrupt, unknown_kind)
{
    base b = build_base();
    set16(&b, b.meminfo + offsetof(rs_record_header, kind), 999);
    reseal(&b);
    expect_corrupt(&b, b.len, b.meminfo, "record 2 (kind 999): unknown record kind 999");
}

Test(corrupt, text_len_overruns_record)
{
    base b = build_base();
    set32(&b, b.push + offsetof(rs_rec_nvtx_name, text_len), 9);
    reseal(&b);
    expect_corrupt(&b, b.len, b.push + offsetof(rs_rec_nvtx_name, text_len),
                   "record 3 (NVTX_PUSH): text_len 9 overruns the record (size 48)");
}

Test(corrupt, string_len_overruns_record)
{
    base b = build_base();
    set32(&b, b.string + offsetof(rs_rec_string, len), 0xffffffffu);
    reseal(&b);
    expect_corrupt(&b, b.len, b.string + offsetof(rs_rec_string, len),
                   "record 0 (STRING): len 4294967295 overruns the record");
}

Test(corrupt, oom_frames_overrun_record)
{
    base b = build_base();
    set32(&b, b.oom + offsetof(rs_record_header, aux), 3);
    reseal(&b);
    expect_corrupt(&b, b.len, b.oom + offsetof(rs_record_header, aux),
                   "record 4 (OOM): 3 frames overrun the record (size 72)");
}

Test(corrupt, module_lengths_overrun_record)
{
    base b = build_base();
    set32(&b, b.module + offsetof(rs_rec_module, build_id_len), 0xfffffff0u);
    reseal(&b);
    expect_corrupt(&b, b.len, b.module + offsetof(rs_rec_module, build_id_len),
                   "record 6 (MODULE): build_id_len 4294967280 + path_len 4 overrun");
}

Test(corrupt, bad_mem_kind)
{
    base b = build_base();
    at(&b, b.alloc + offsetof(rs_rec_alloc, mem))[0] = 7;
    reseal(&b);
    expect_corrupt(&b, b.len, b.alloc + offsetof(rs_rec_alloc, mem),
                   "record 1 (ALLOC): memory kind 7 out of range (0..2)");
}

Test(corrupt, unknown_api_code)
{
    base b = build_base();
    set16(&b, b.free_ + offsetof(rs_rec_free, api), 999);
    reseal(&b);
    expect_corrupt(&b, b.len, b.free_ + offsetof(rs_rec_free, api), "unknown api code 999");
}

Test(corrupt, bad_meminfo_reason)
{
    base b = build_base();
    set32(&b, b.meminfo + offsetof(rs_record_header, aux), 9);
    reseal(&b);
    expect_corrupt(&b, b.len, b.meminfo + offsetof(rs_record_header, aux),
                   "meminfo reason 9 out of range");
}

Test(corrupt, bad_window_state)
{
    base b = build_base();
    set32(&b, b.window + offsetof(rs_record_header, aux), 5);
    reseal(&b);
    expect_corrupt(&b, b.len, b.window + offsetof(rs_record_header, aux),
                   "record 7 (WINDOW): window state 5 out of range");
}

Test(corrupt, bad_meta_key)
{
    base b = build_base();
    set32(&b, b.meta + offsetof(rs_rec_meta, key), 77);
    reseal(&b);
    expect_corrupt(&b, b.len, b.meta + offsetof(rs_rec_meta, key), "unknown meta key 77");
}

/* Every single-byte flip of the header and first records: no crash, and
 * either a clean read or a clean refusal. */
Test(corrupt, byte_flips_never_crash)
{
    base b = build_base();
    unsigned char *buf = b.t->buf;
    uint64_t ranges[][2] = {{0, sizeof(rs_file_header)},
                            {chunk_off(&b, 0), b.free_ + sizeof(rs_rec_free)}};
    for (int k = 0; k < 2; k++)
        for (uint64_t i = ranges[k][0]; i < ranges[k][1]; i++) {
            for (int bit = 0; bit < 8; bit += 3) {
                buf[i] ^= (unsigned char)(1u << bit);
                rs_reader *r;
                char err[640];
                int rc = rs_reader_open_mem(buf, b.len, "flip", &r, err, sizeof err);
                if (rc == RS_READ_OK) {
                    rs_iter *it = rs_iter_new(r);
                    rs_event ev;
                    while (rs_iter_next(it, &ev) > 0)
                        ;
                    rs_iter_free(it);
                    rs_reader_close(r);
                } else {
                    cr_assert_eq(rc, RS_READ_EFORMAT);
                    cr_assert(!strncmp(err, "flip: offset ", 13), "%s", err);
                }
                buf[i] ^= (unsigned char)(1u << bit);
            }
        }
    tb_free(b.t);
}

/* #11: a creation field changed to another valid value is caught by the
 * header checksum (format 1.2), named at the checksum's offset. */
Test(corrupt, header_creation_field_changed)
{
    base b = build_base();
    tb_header(b.t)->rank = 3; /* valid, but not what was written */
    expect_corrupt(&b, b.len, offsetof(rs_file_header, header_checksum),
                   "header checksum mismatch");
}

/* The fields a running shim still updates are outside the checksum (each
 * has its own check or is only informative). */
static int
mutable_byte(size_t i)
{
#define IN(f) (i >= offsetof(rs_file_header, f) && \
               i < offsetof(rs_file_header, f) + sizeof(((rs_file_header *)0)->f))
    return IN(flags) || IN(chunks_published) || IN(device) || IN(device_capacity) ||
           IN(limit_hit_ns) || IN(dropped_records) || IN(close_ns);
#undef IN
}

/* #11, property over every bit of the header: one flipped bit in a byte
 * written at creation (magic, versions, sizes, identity, clocks, settings,
 * the checksum itself) is never accepted: the reader refuses the file,
 * naming an offset inside the header. */
Test(corrupt, every_header_bit_flip_refused)
{
    base b = build_base();
    size_t tried = 0, refused = 0;
    for (size_t i = 0; i < sizeof(rs_file_header); i++) {
        if (mutable_byte(i))
            continue;
        for (int bit = 0; bit < 8; bit++) {
            b.t->buf[i] ^= (unsigned char)(1u << bit);
            rs_reader *r = NULL;
            char err[640];
            int rc = rs_reader_open_mem(b.t->buf, b.len, "h", &r, err, sizeof err);
            tried++;
            uint64_t off = UINT64_MAX;
            if (rc == RS_READ_EFORMAT && sscanf(err, "h: offset %" SCNu64 ":", &off) == 1 &&
                off < sizeof(rs_file_header))
                refused++;
            else
                cr_expect(0, "byte %zu bit %d: rc %d '%s'", i, bit, rc, rc ? err : "accepted");
            rs_reader_close(r);
            b.t->buf[i] ^= (unsigned char)(1u << bit);
        }
    }
    cr_expect_eq(refused, tried, "%zu of %zu flips refused", refused, tried);
    cr_log_info("header bit flips: %zu tried, %zu refused", tried, refused);
    tb_free(b.t);
}

/* A format 1.1 trace (no header checksum) is still read, with a note. */
Test(corrupt, older_minor_without_checksum_read_with_note)
{
    base b = build_base();
    as_minor(&b, RS_TRACE_MINOR_HEADER_CHECKSUM - 1); /* chunks: FNV-1a 64 */
    tb_header(b.t)->header_checksum = 0;
    rs_reader *r;
    char err[640];
    cr_assert_eq(rs_reader_open_mem(b.t->buf, b.len, "old", &r, err, sizeof err), 0, "%s", err);
    int noted = 0;
    for (size_t i = 0; i < rs_reader_warning_count(r); i++)
        noted |= strstr(rs_reader_warning(r, i), "header fields are not verified") != NULL;
    cr_expect(noted, "no note about the unverified header");
    rs_reader_close(r);
    tb_free(b.t);
}

/* #11: records of an unsealed chunk (a killed process's last) are each
 * validated, and their number is stated; a damaged one is named by offset. */
Test(corrupt, unsealed_chunk_records_counted_and_checked)
{
    base b = build_base();
    rs_chunk_header *ch = tb_chunk_header(b.t, 0);
    ch->flags &= ~RS_CHUNK_SEALED;
    ch->checksum = 0;
    ch->checksum_len = 0;
    b.len = tb_finish(b.t, 0);
    rs_reader *r;
    char err[640];
    cr_assert_eq(rs_reader_open_mem(b.t->buf, b.len, "u", &r, err, sizeof err), 0, "%s", err);
    int stated = 0;
    for (size_t i = 0; i < rs_reader_warning_count(r); i++)
        stated |= strstr(rs_reader_warning(r, i), "1 unsealed chunk(s)") &&
                  strstr(rs_reader_warning(r, i), "their 9 record(s) were each checked");
    cr_expect(stated, "the unsealed chunk's records are not counted in a warning");
    rs_reader_close(r);
    /* a kind out of range inside it: named by the record's offset */
    set16(&b, b.alloc + offsetof(rs_record_header, kind), 999);
    expect_corrupt(&b, b.len, b.alloc, "unknown record kind 999");
}

/* ---- (1.3) Python frames: ids not 0, a stack's parent below its own id
 * (so walking parents ends), and a valid stack read back and printed ---- */

typedef struct py_base {
    base b;
    uint64_t frame, stack2;
} py_base;

static py_base
build_py(void)
{
    py_base p = {{0}, 0, 0};
    p.b.t = tb_new(0, 2);
    tb_trace *t = p.b.t;
    uint32_t c = tb_chunk(t, 5);
    uint64_t ts = 1000100;
    rs_rec_string s = {.h = {.kind = RS_REC_STRING, .t_ns = ts++}, .id = 1, .len = 3};
    tb_put(t, c, &s, sizeof s, "fwd", 3);
    rs_rec_string s2 = {.h = {.kind = RS_REC_STRING, .t_ns = ts++}, .id = 2, .len = 7};
    tb_put(t, c, &s2, sizeof s2, "/m/x.py", 7);
    rs_rec_pyframe f = {.h = {.kind = RS_REC_PYFRAME, .t_ns = ts++}, .id = 1, .name_id = 1,
                        .file_id = 2, .line = 3};
    p.frame = tb_put(t, c, &f, sizeof f, NULL, 0);
    rs_rec_pystack s1 = {.h = {.kind = RS_REC_PYSTACK, .t_ns = ts++}, .id = 1, .parent = 0,
                         .frame = 1};
    tb_put(t, c, &s1, sizeof s1, NULL, 0);
    rs_rec_pystack st2 = {.h = {.kind = RS_REC_PYSTACK, .t_ns = ts++}, .id = 2, .parent = 1,
                          .frame = 1};
    p.stack2 = tb_put(t, c, &st2, sizeof st2, NULL, 0);
    rs_rec_alloc a = {.h = {.kind = RS_REC_ALLOC, .aux = 2, .t_ns = ts++}, .ptr = 0x1000,
                      .size = 512, .api = RS_API_cudaMalloc};
    tb_put(t, c, &a, sizeof a, NULL, 0);
    tb_seal(t, c);
    p.b.len = tb_finish(t, 1);
    return p;
}

Test(corrupt, pystack_valid_reads_and_prints)
{
    py_base p = build_py();
    rs_reader *r;
    char err[640];
    cr_assert_eq(rs_reader_open_mem(p.b.t->buf, p.b.len, "py", &r, err, sizeof err), 0, "%s",
                 err);
    uint32_t parent = 9, frame = 9;
    cr_assert_eq(rs_reader_pystack(r, 2, &parent, &frame), 1);
    cr_expect_eq(parent, 1);
    cr_expect_eq(frame, 1);
    cr_expect_eq(rs_reader_pystack(r, 0, &parent, &frame), 0, "id 0 is no stack");
    rs_pyframe_info fi;
    cr_assert_eq(rs_reader_pyframe(r, 1, &fi), 1);
    cr_expect(fi.name_len == 3 && !memcmp(fi.name, "fwd", 3) && fi.line == 3);
    cr_expect(fi.file_len == 7 && !memcmp(fi.file, "/m/x.py", 7));
    rs_reader_close(r);
    char *path = tb_tmpname();
    cr_assert_eq(tb_write(p.b.t, path, p.b.len), 0);
    char *out, *e;
    cr_assert_eq(run_dump(RECOMP_DUMP_PATH, path, &out, &e), 0, "%s", e);
    cr_expect(strstr(out, " pystack=2\n  py #0 fwd (/m/x.py:3)\n  py #1 fwd (/m/x.py:3)\n"),
              "%s", out);
    cr_expect(strstr(out, "PYFRAME t=") && strstr(out, "id=1 name=\"fwd\" file=\"/m/x.py\" line=3"),
              "%s", out);
    free(out);
    free(e);
    unlink(path);
    free(path);
    tb_free(p.b.t);
}

Test(corrupt, pystack_parent_not_below_id)
{
    py_base p = build_py();
    set32(&p.b, p.stack2 + offsetof(rs_rec_pystack, parent), 2);
    tb_seal(p.b.t, 0);
    expect_corrupt(&p.b, p.b.len, p.stack2 + offsetof(rs_rec_pystack, parent),
                   "record 4 (PYSTACK): parent stack 2 is not below its own id 2");
}

Test(corrupt, pyframe_id_zero)
{
    py_base p = build_py();
    set32(&p.b, p.frame + offsetof(rs_rec_pyframe, id), 0);
    tb_seal(p.b.t, 0);
    expect_corrupt(&p.b, p.b.len, p.frame + offsetof(rs_rec_pyframe, id),
                   "record 2 (PYFRAME): frame id 0");
}

Test(corrupt, pystack_frame_zero)
{
    py_base p = build_py();
    set32(&p.b, p.stack2 + offsetof(rs_rec_pystack, frame), 0);
    tb_seal(p.b.t, 0);
    expect_corrupt(&p.b, p.b.len, p.stack2 + offsetof(rs_rec_pystack, frame),
                   "record 4 (PYSTACK): frame id 0");
}

/* #19: the open folds a sealed chunk's checksum into the walk that
 * validates its records. Damage that is also a record error, not re-sealed,
 * is still reported as the checksum mismatch at the chunk's offset, as when
 * the checksum was checked before the walk: whether the walk stops at the
 * damaged record (size 0) or at a later field check (unknown api code). */
Test(corrupt, checksum_mismatch_wins_over_record_error)
{
    base b = build_base();
    set16(&b, b.meminfo + offsetof(rs_record_header, size), 0);
    expect_corrupt(&b, b.len, chunk_off(&b, 0), "chunk 0: checksum mismatch");
    b = build_base();
    set16(&b, b.alloc + offsetof(rs_rec_alloc, api), 0x7777);
    expect_corrupt(&b, b.len, chunk_off(&b, 0), "chunk 0: checksum mismatch");
    /* re-sealed, the same damage is the record error */
    b = build_base();
    set16(&b, b.alloc + offsetof(rs_rec_alloc, api), 0x7777);
    reseal(&b);
    expect_corrupt(&b, b.len, b.alloc + offsetof(rs_rec_alloc, api), "unknown api code");
}

/* Set chunk 0's checksum_len to `len` payload bytes and its checksum to
 * rs_checksum over them (a writer that sealed part of what it wrote). */
static void
seal_first(base *b, uint32_t len)
{
    rs_chunk_header *ch = tb_chunk_header(b->t, 0);
    ch->checksum_len = len;
    ch->checksum = rs_chunk_checksum(tb_header(b->t)->version_minor,
                                     at(b, chunk_off(b, 0) + sizeof *ch), len);
}

static void
expect_opens(base *b)
{
    char err[640];
    rs_reader *r = NULL;
    int rc = rs_reader_open_mem(b->t->buf, b->len, "ok.trace", &r, err, sizeof err);
    cr_assert_eq(rc, RS_READ_OK, "%s", err);
    rs_reader_close(r);
}

/* #19: a checksum that covers part of the used bytes, ending inside a
 * record (12 bytes into the ALLOC) or at a record's end, is computed over
 * exactly those bytes by the folded walk: the trace opens, a change past
 * checksum_len goes unnoticed by the checksum (the record is still valid),
 * a change before it is a mismatch over that many bytes. */
Test(corrupt, partial_checksum_folded_exactly)
{
    /* each for format 1.4's serial checksum and 1.5's four lanes */
    for (int k = 0; k < 4; k++) {
        int end_in_record = k & 1;
        base b = build_base();
        if (k >= 2)
            as_minor(&b, RS_TRACE_MINOR_COMPACT);
        uint64_t payload = chunk_off(&b, 0) + sizeof(rs_chunk_header);
        uint32_t len = (uint32_t)(end_in_record ? b.alloc - payload + 12 : b.meminfo - payload);
        seal_first(&b, len);
        expect_opens(&b);
        at(&b, b.free_ + offsetof(rs_rec_free, ptr))[0] ^= 0x10; /* past len */
        expect_opens(&b);
        at(&b, b.alloc + 8)[0] ^= 0x01; /* t_ns, inside len */
        char want[96];
        snprintf(want, sizeof want, "chunk 0: checksum mismatch: stored 0x%016" PRIx64
                                    ", computed 0x%016" PRIx64 " over %" PRIu32 " bytes",
                 tb_chunk_header(b.t, 0)->checksum,
                 rs_chunk_checksum(tb_header(b.t)->version_minor, at(&b, payload), len),
                 len);
        expect_corrupt(&b, b.len, chunk_off(&b, 0), want);
    }
}

/* #19: a sealed chunk whose checksum covers no bytes still has its stored
 * checksum compared (with FNV-1a's initial state). */
Test(corrupt, empty_checksum_compared)
{
    base b = build_base();
    seal_first(&b, 0);
    expect_opens(&b);
    tb_chunk_header(b.t, 0)->checksum ^= 1;
    expect_corrupt(&b, b.len, chunk_off(&b, 0), "checksum mismatch");
}

/* ---- format 1.4: SITE, ALLOC_C, FREE_C (issue 19) ---- */

typedef struct compact_base {
    base b;
    uint64_t site1, alloc_c, free_c, site2, free_c2;
} compact_base;

/* One sealed chunk: STRING, SITE 1, ALLOC_C and FREE_C at site 1, SITE 2,
 * FREE_C at site 2; times 1000100, +0, +5, +7, 1000200, +3. */
static compact_base
build_compact(void)
{
    compact_base p;
    memset(&p, 0, sizeof p);
    p.b.t = tb_new(0, 2);
    tb_trace *t = p.b.t;
    uint32_t c = tb_chunk(t, 5);
    rs_rec_string s = {.h = {.kind = RS_REC_STRING, .t_ns = 1000100}, .id = 1, .len = 3};
    tb_put(t, c, &s, sizeof s, "fwd", 3);
    rs_rec_site s1 = {.h = {.kind = RS_REC_SITE, .aux = 1, .t_ns = 1000100}, .caller = 0x4321,
                      .stream = 0x77, .api = RS_API_cudaMallocAsync, .mem = RS_MEM_DEVICE,
                      .device = 1};
    p.site1 = tb_put(t, c, &s1, sizeof s1, NULL, 0);
    rs_rec_alloc_c a = {.h = {.kind = RS_REC_ALLOC_C, .dt_ns = 5}, .ptr = 0x1000, .size = 512,
                        .site = 1, .pystack = 0};
    p.alloc_c = tb_put(t, c, &a, sizeof a, NULL, 0);
    rs_rec_free_c f = {.h = {.kind = RS_REC_FREE_C, .dt_ns = 7}, .ptr = 0x1000, .site = 1};
    p.free_c = tb_put(t, c, &f, sizeof f, NULL, 0);
    rs_rec_site s2 = {.h = {.kind = RS_REC_SITE, .aux = 2, .t_ns = 1000200}, .caller = 0x5555,
                      .stream = 0, .api = RS_API_cudaFree, .mem = RS_MEM_MANAGED, .device = -1};
    p.site2 = tb_put(t, c, &s2, sizeof s2, NULL, 0);
    rs_rec_free_c f2 = {.h = {.kind = RS_REC_FREE_C, .dt_ns = 3}, .ptr = 0x2000, .site = 2};
    p.free_c2 = tb_put(t, c, &f2, sizeof f2, NULL, 0);
    tb_seal(t, c);
    p.b.len = tb_finish(t, 1);
    return p;
}

Test(corrupt, compact_valid_reads_expanded)
{
    compact_base p = build_compact();
    rs_reader *r;
    char err[640];
    cr_assert_eq(rs_reader_open_mem(p.b.t->buf, p.b.len, "c", &r, err, sizeof err), 0, "%s",
                 err);
    cr_assert_eq(rs_reader_record_count(r), 6);
    rs_iter *it = rs_iter_new(r);
    rs_event ev;
    uint16_t kinds[8];
    uint64_t ts[8], offs[8];
    int n = 0;
    rs_rec_alloc a = {0};
    rs_rec_free f = {0}, f2 = {0};
    while (n < 8 && rs_iter_next(it, &ev) == 1) {
        kinds[n] = ev.rec->kind;
        ts[n] = ev.rec->t_ns;
        offs[n] = ev.offset;
        if (n == 2)
            memcpy(&a, ev.rec, sizeof a);
        if (n == 3)
            memcpy(&f, ev.rec, sizeof f);
        if (n == 5)
            memcpy(&f2, ev.rec, sizeof f2);
        n++;
    }
    rs_iter_free(it);
    cr_assert_eq(n, 6);
    uint16_t want_kinds[] = {RS_REC_STRING, RS_REC_SITE, RS_REC_ALLOC, RS_REC_FREE, RS_REC_SITE,
                             RS_REC_FREE};
    uint64_t want_t[] = {1000100, 1000100, 1000105, 1000112, 1000200, 1000203};
    for (int i = 0; i < 6; i++) {
        cr_expect_eq(kinds[i], want_kinds[i], "event %d kind %u", i, kinds[i]);
        cr_expect_eq(ts[i], want_t[i], "event %d t %llu", i, (unsigned long long)ts[i]);
    }
    cr_expect_eq(offs[2], p.alloc_c, "the offset names the compact record");
    cr_expect_eq(offs[5], p.free_c2);
    cr_expect(a.h.size == sizeof a && a.ptr == 0x1000 && a.size == 512 && a.caller == 0x4321 &&
              a.stream == 0x77 && a.api == RS_API_cudaMallocAsync && a.mem == RS_MEM_DEVICE &&
              a.device == 1 && a.status == 0 && a.h.aux == 0);
    cr_expect(f.h.size == sizeof f && f.ptr == 0x1000 && f.caller == 0x4321 && f.stream == 0x77 &&
              f.api == RS_API_cudaMallocAsync && f.device == 1 && f.status == 0);
    cr_expect(f2.ptr == 0x2000 && f2.caller == 0x5555 && f2.stream == 0 &&
              f2.api == RS_API_cudaFree && f2.mem == RS_MEM_MANAGED && f2.device == -1);
    rs_reader_close(r);
    char *path = tb_tmpname();
    cr_assert_eq(tb_write(p.b.t, path, p.b.len), 0);
    char *out, *e;
    cr_assert_eq(run_dump(RECOMP_DUMP_PATH, path, &out, &e), 0, "%s", e);
    cr_expect(strstr(out, "SITE t=100 ") && strstr(out, "id=1 api=cudaMallocAsync mem=device "
                                                        "dev=1 stream=0x77 caller=0x4321"),
              "%s", out);
    cr_expect(strstr(out, "ALLOC t=105 ") && strstr(out, "FREE t=112 ") &&
              strstr(out, "FREE t=203 "), "%s", out);
    free(out);
    free(e);
    unlink(path);
    free(path);
    tb_free(p.b.t);
}

Test(corrupt, compact_site_not_defined)
{
    compact_base p = build_compact();
    set32(&p.b, p.alloc_c + offsetof(rs_rec_alloc_c, site), 2);
    tb_seal(p.b.t, 0);
    expect_corrupt(&p.b, p.b.len, p.alloc_c + offsetof(rs_rec_alloc_c, site),
                   "record 2 (ALLOC_C): site id 2 is not defined earlier in this chunk (1 defined)");
}

Test(corrupt, compact_site_zero)
{
    compact_base p = build_compact();
    set32(&p.b, p.free_c + offsetof(rs_rec_free_c, site), 0);
    tb_seal(p.b.t, 0);
    expect_corrupt(&p.b, p.b.len, p.free_c + offsetof(rs_rec_free_c, site),
                   "record 3 (FREE_C): site id 0 is not defined earlier in this chunk");
}

Test(corrupt, compact_site_ids_out_of_order)
{
    compact_base p = build_compact();
    set32(&p.b, p.site2 + offsetof(rs_record_header, aux), 3);
    tb_seal(p.b.t, 0);
    expect_corrupt(&p.b, p.b.len, p.site2 + offsetof(rs_record_header, aux),
                   "record 4 (SITE): site id 3 out of order (the chunk's next site id is 2)");
}

Test(corrupt, compact_site_unknown_api)
{
    compact_base p = build_compact();
    set16(&p.b, p.site1 + offsetof(rs_rec_site, api), 999);
    tb_seal(p.b.t, 0);
    expect_corrupt(&p.b, p.b.len, p.site1 + offsetof(rs_rec_site, api),
                   "record 1 (SITE): unknown api code 999");
}

Test(corrupt, compact_site_bad_mem_kind)
{
    compact_base p = build_compact();
    at(&p.b, p.site2 + offsetof(rs_rec_site, mem))[0] = 9;
    tb_seal(p.b.t, 0);
    expect_corrupt(&p.b, p.b.len, p.site2 + offsetof(rs_rec_site, mem),
                   "record 4 (SITE): memory kind 9 out of range");
}

Test(corrupt, compact_record_first_in_chunk)
{
    compact_base p;
    memset(&p, 0, sizeof p);
    p.b.t = tb_new(0, 2);
    uint32_t c = tb_chunk(p.b.t, 5);
    rs_rec_free_c f = {.h = {.kind = RS_REC_FREE_C, .dt_ns = 1}, .ptr = 0x1000, .site = 1};
    uint64_t off = tb_put(p.b.t, c, &f, sizeof f, NULL, 0);
    tb_seal(p.b.t, c);
    p.b.len = tb_finish(p.b.t, 1);
    expect_corrupt(&p.b, p.b.len, off,
                   "record 0 (FREE_C): a compact record cannot be its chunk's first record");
}

Test(corrupt, compact_time_overflows)
{
    compact_base p = build_compact();
    uint64_t t = UINT64_MAX - 3;
    memcpy(at(&p.b, p.site1 + offsetof(rs_record_header, t_ns)), &t, 8);
    tb_seal(p.b.t, 0);
    expect_corrupt(&p.b, p.b.len, p.alloc_c + offsetof(rs_compact_header, dt_ns),
                   "record 2 (ALLOC_C): time overflows 64 bits");
}

/* --salvage skips a chunk whose compact records are damaged and reads the
 * others, whose sites are their own. */
Test(corrupt, compact_damage_salvaged_per_chunk)
{
    compact_base p = build_compact();
    uint32_t c = tb_chunk(p.b.t, 5);
    rs_rec_site s = {.h = {.kind = RS_REC_SITE, .aux = 1, .t_ns = 2000000}, .caller = 0x9,
                     .api = RS_API_cudaMalloc};
    tb_put(p.b.t, c, &s, sizeof s, NULL, 0);
    rs_rec_alloc_c a = {.h = {.kind = RS_REC_ALLOC_C, .dt_ns = 1}, .ptr = 0x3000, .size = 64,
                        .site = 1};
    tb_put(p.b.t, c, &a, sizeof a, NULL, 0);
    tb_seal(p.b.t, c);
    p.b.len = tb_finish(p.b.t, 1);
    set32(&p.b, p.free_c + offsetof(rs_rec_free_c, site), 7);
    tb_seal(p.b.t, 0);
    char *path = tb_tmpname();
    cr_assert_eq(tb_write(p.b.t, path, p.b.len), 0);
    rs_reader *r;
    char err[640];
    cr_assert_eq(rs_reader_open_flags(path, RS_READ_SALVAGE, &r, err, sizeof err), 0, "%s", err);
    uint32_t chunks;
    uint64_t bytes;
    rs_reader_salvaged(r, &chunks, &bytes);
    cr_expect_eq(chunks, 1);
    rs_iter *it = rs_iter_new(r);
    rs_event ev;
    int n = 0;
    while (rs_iter_next(it, &ev) == 1) {
        const rs_rec_alloc *x = (const void *)ev.rec;
        if (ev.rec->kind == RS_REC_ALLOC)
            cr_expect(x->ptr == 0x3000 && x->caller == 0x9 && x->h.t_ns == 2000001);
        n++;
    }
    cr_expect_eq(n, 2, "the second chunk's SITE and ALLOC");
    rs_iter_free(it);
    rs_reader_close(r);
    unlink(path);
    free(path);
    tb_free(p.b.t);
}

/* ---- format 1.5: ALLOC_P, FREE_P, the four-lane seal (issue 19) ---- */

typedef struct packed_base {
    base b;
    uint64_t site1, alloc_p, free_p;
} packed_base;

/* One sealed chunk of a 1.5 file: STRING, SITE 1, ALLOC_P and FREE_P at
 * site 1; times 1000100, 1000100, +5, +7. The pointer is the largest that
 * packs (2^48 - 1). */
static packed_base
build_packed(void)
{
    packed_base p;
    memset(&p, 0, sizeof p);
    p.b.t = tb_new(0, 2);
    tb_trace *t = p.b.t;
    cr_assert_geq(tb_header(t)->version_minor, RS_TRACE_MINOR_PACKED);
    uint32_t c = tb_chunk(t, 5);
    rs_rec_string s = {.h = {.kind = RS_REC_STRING, .t_ns = 1000100}, .id = 1, .len = 3};
    tb_put(t, c, &s, sizeof s, "fwd", 3);
    rs_rec_site s1 = {.h = {.kind = RS_REC_SITE, .aux = 1, .t_ns = 1000100}, .caller = 0x4321,
                      .stream = 0x77, .api = RS_API_cudaMallocAsync, .mem = RS_MEM_DEVICE,
                      .device = 1};
    p.site1 = tb_put(t, c, &s1, sizeof s1, NULL, 0);
    rs_rec_alloc_p a = {.h = {.kind = RS_REC_ALLOC_P, .dt_ns = 5},
                        .ptr_site = rs_packed_word(RS_PACKED_PTR_MASK, 1), .size = UINT32_MAX,
                        .pystack = 0};
    p.alloc_p = tb_put(t, c, &a, sizeof a, NULL, 0);
    rs_rec_free_p f = {.h = {.kind = RS_REC_FREE_P, .dt_ns = 7},
                       .ptr_site = rs_packed_word(RS_PACKED_PTR_MASK, 1)};
    p.free_p = tb_put(t, c, &f, sizeof f, NULL, 0);
    tb_seal(t, c);
    p.b.len = tb_finish(t, 1);
    return p;
}

Test(corrupt, packed_valid_reads_expanded)
{
    packed_base p = build_packed();
    rs_reader *r;
    char err[640];
    cr_assert_eq(rs_reader_open_mem(p.b.t->buf, p.b.len, "p", &r, err, sizeof err), 0, "%s",
                 err);
    rs_iter *it = rs_iter_new(r);
    rs_event ev;
    rs_rec_alloc a = {0};
    rs_rec_free f = {0};
    int n = 0;
    while (rs_iter_next(it, &ev) == 1) {
        if (ev.rec->kind == RS_REC_ALLOC) {
            memcpy(&a, ev.rec, sizeof a);
            cr_expect_eq(ev.offset, p.alloc_p, "the offset names the packed record");
        }
        if (ev.rec->kind == RS_REC_FREE)
            memcpy(&f, ev.rec, sizeof f);
        n++;
    }
    rs_iter_free(it);
    cr_assert_eq(n, 4);
    cr_expect(a.h.size == sizeof a && a.h.t_ns == 1000105 && a.ptr == RS_PACKED_PTR_MASK &&
              a.size == UINT32_MAX && a.caller == 0x4321 && a.stream == 0x77 &&
              a.api == RS_API_cudaMallocAsync && a.mem == RS_MEM_DEVICE && a.device == 1 &&
              a.status == 0 && a.h.aux == 0);
    cr_expect(f.h.size == sizeof f && f.h.t_ns == 1000112 && f.ptr == RS_PACKED_PTR_MASK &&
              f.caller == 0x4321 && f.stream == 0x77 && f.device == 1 && f.status == 0);
    rs_reader_close(r);
    tb_free(p.b.t);
}

Test(corrupt, packed_site_not_defined)
{
    packed_base p = build_packed();
    at(&p.b, p.free_p + offsetof(rs_rec_free_p, ptr_site) + 6)[0] = 2;
    tb_seal(p.b.t, 0);
    expect_corrupt(&p.b, p.b.len, p.free_p + offsetof(rs_rec_free_p, ptr_site) + 6,
                   "record 3 (FREE_P): site id 2 is not defined earlier in this chunk (1 defined)");
}

Test(corrupt, packed_site_zero)
{
    packed_base p = build_packed();
    memset(at(&p.b, p.alloc_p + offsetof(rs_rec_alloc_p, ptr_site) + 6), 0, 2);
    tb_seal(p.b.t, 0);
    expect_corrupt(&p.b, p.b.len, p.alloc_p + offsetof(rs_rec_alloc_p, ptr_site) + 6,
                   "record 2 (ALLOC_P): site id 0 is not defined earlier in this chunk");
}

Test(corrupt, packed_record_first_in_chunk)
{
    packed_base p;
    memset(&p, 0, sizeof p);
    p.b.t = tb_new(0, 2);
    uint32_t c = tb_chunk(p.b.t, 5);
    rs_rec_free_p f = {.h = {.kind = RS_REC_FREE_P, .dt_ns = 1},
                       .ptr_site = rs_packed_word(0x1000, 1)};
    uint64_t off = tb_put(p.b.t, c, &f, sizeof f, NULL, 0);
    tb_seal(p.b.t, c);
    p.b.len = tb_finish(p.b.t, 1);
    expect_corrupt(&p.b, p.b.len, off,
                   "record 0 (FREE_P): a compact record cannot be its chunk's first record");
}

Test(corrupt, packed_time_overflows)
{
    packed_base p = build_packed();
    uint64_t t = UINT64_MAX - 3;
    memcpy(at(&p.b, p.site1 + offsetof(rs_record_header, t_ns)), &t, 8);
    tb_seal(p.b.t, 0);
    expect_corrupt(&p.b, p.b.len, p.alloc_p + offsetof(rs_compact_header, dt_ns),
                   "record 2 (ALLOC_P): time overflows 64 bits");
}

/* The chunk checksum follows the file's version: a 1.5 chunk sealed with
 * 1.4's serial FNV-1a is a mismatch, the same chunk in a 1.4 file reads;
 * a flipped payload bit is caught by the four lanes. */
Test(corrupt, packed_checksum_by_version)
{
    packed_base p = build_packed();
    rs_chunk_header *ch = tb_chunk_header(p.b.t, 0);
    const unsigned char *payload = (const unsigned char *)ch + sizeof *ch;
    cr_assert_eq(ch->checksum, rs_checksum4(payload, ch->used));
    ch->checksum = rs_checksum(payload, ch->used);
    expect_corrupt(&p.b, p.b.len, chunk_off(&p.b, 0), "chunk 0: checksum mismatch");

    p = build_packed();
    as_minor(&p.b, RS_TRACE_MINOR_COMPACT);
    ch = tb_chunk_header(p.b.t, 0);
    cr_assert_eq(ch->checksum, rs_checksum((const unsigned char *)ch + sizeof *ch, ch->used));
    expect_opens(&p.b);
    tb_free(p.b.t);

    for (uint32_t bit = 0; bit < 96 * 8; bit += 13) {
        p = build_packed();
        base *b = &p.b;
        at(b, chunk_off(b, 0) + sizeof *ch + bit / 8)[0] ^= (unsigned char)(1u << (bit % 8));
        expect_corrupt(b, b->len, chunk_off(b, 0), "chunk 0: checksum mismatch");
    }
}

/* rs_checksum4 folded piece by piece (pieces of 8, 16, 24, ... bytes, the
 * last any length) equals one call over the whole; and it is the
 * definition in trace_format.h computed here word by word. */
Test(corrupt, checksum4_pieces_and_definition)
{
    unsigned char buf[301];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)(i * 131 + 7);
    for (uint64_t len = 0; len <= sizeof buf; len += 1) {
        uint64_t lane[4];
        for (int j = 0; j < 4; j++)
            lane[j] = RS_CHECKSUM_INIT + (uint64_t)j;
        for (uint64_t i = 0; i < len; i += 8) {
            uint64_t w = 0;
            for (uint64_t k = 0; k < 8 && i + k < len; k++)
                w |= (uint64_t)buf[i + k] << (8 * k);
            lane[(i / 8) % 4] = (lane[(i / 8) % 4] ^ w) * 0x100000001b3ull;
        }
        uint64_t want = RS_CHECKSUM_INIT;
        for (int j = 0; j < 4; j++)
            want = (want ^ lane[j]) * 0x100000001b3ull;
        want = (want ^ len) * 0x100000001b3ull;
        cr_assert_eq(rs_checksum4(buf, len), want, "len %llu", (unsigned long long)len);
        for (uint64_t piece = 8; piece <= 40; piece += 8) {
            rs_checksum4_state s;
            rs_checksum4_init(&s);
            uint64_t at_ = 0;
            for (; at_ + piece < len; at_ += piece)
                rs_checksum4_more(&s, buf + at_, piece);
            rs_checksum4_more(&s, buf + at_, len - at_);
            cr_assert_eq(rs_checksum4_final(&s), want, "len %llu piece %llu",
                         (unsigned long long)len, (unsigned long long)piece);
        }
    }
}

/* Format 1.6's exit fields (offset 536, after the header): read from a
 * closed 1.6 file; range-checked and named by offset when damaged; a `via`
 * without CLOSED (a live file read while its process sealed it) reads as no
 * exit seen. */
static rs_header_exit *
exit_fields(base *b)
{
    return (rs_header_exit *)(void *)at(b, RS_HEADER_EXIT_OFFSET);
}

Test(corrupt, exit_fields_read_and_checked)
{
    static const struct {
        uint32_t via;
        int32_t status;
        int closed, want_via, want_status;
        uint64_t bad_off;
        const char *bad;
    } k[] = {
        {RS_EXIT__EXIT, 3, 1, RS_EXIT__EXIT, 3, 0, NULL},
        {RS_EXIT__EXIT_C, -1, 1, RS_EXIT__EXIT_C, -1, 0, NULL},
        {RS_EXIT__EXIT, 3, 0, 0, 0, 0, NULL},
        {0, 0, 1, 0, 0, 0, NULL},
        {RS_EXIT_VIA_MAX + 1, 0, 1, 0, 0, RS_HEADER_EXIT_OFFSET, "exit via 3 out of range"},
        {0, 4, 1, 0, 0, RS_HEADER_EXIT_OFFSET + 4, "exit status 4 without an exit"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        base b = build_base();
        cr_assert_eq(tb_header(b.t)->version_minor, RS_TRACE_MINOR_EXIT);
        *exit_fields(&b) = (rs_header_exit){.via = k[i].via, .status = k[i].status};
        b.len = tb_finish(b.t, k[i].closed);
        if (k[i].bad) {
            expect_corrupt(&b, b.len, k[i].bad_off, k[i].bad);
            continue;
        }
        rs_reader *r;
        char err[640];
        cr_assert_eq(rs_reader_open_mem(b.t->buf, b.len, "x", &r, err, sizeof err), 0, "%zu: %s",
                     i, err);
        int via = -1, status = -1;
        rs_reader_exit(r, &via, &status);
        cr_expect(via == k[i].want_via && status == k[i].want_status, "%zu: via %d status %d",
                  i, via, status);
        rs_reader_close(r);
        tb_free(b.t);
    }
}

/* Files before 1.6 read as before: whatever their bytes at offset 536 hold
 * is not read (no exit seen, no error). */
Test(corrupt, older_minor_exit_bytes_not_read)
{
    base b = build_base();
    memset(exit_fields(&b), 0xff, sizeof(rs_header_exit));
    as_minor(&b, RS_TRACE_MINOR_EXIT - 1);
    rs_reader *r;
    char err[640];
    cr_assert_eq(rs_reader_open_mem(b.t->buf, b.len, "old", &r, err, sizeof err), 0, "%s", err);
    int via = -1, status = -1;
    rs_reader_exit(r, &via, &status);
    cr_expect(via == 0 && status == 0, "via %d status %d", via, status);
    cr_expect(rs_reader_closed(r));
    rs_reader_close(r);
    tb_free(b.t);
}
