/* fuzz_reader.c: libFuzzer target feeding arbitrary bytes to the reader.
 *
 * Opens the bytes as a trace; when they are accepted, iterates every event
 * and calls every lookup recomp-dump would make. Any crash, leak or
 * out-of-bounds read (under ASan/UBSan) is a bug. Built by run-fuzz.sh
 * with clang; test_corpus.c also links this file and replays the seed
 * corpus through the same function without libFuzzer.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "trace_reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static FILE *
sink(void)
{
    static FILE *f;
    if (!f)
        f = fopen("/dev/null", "w");
    return f;
}

static void
touch_text(const char *s, uint32_t len)
{
    FILE *f = sink();
    if (f)
        rs_fput_escaped(f, s, len);
}

static void
touch_event(rs_reader *r, const rs_event *ev)
{
    const rs_record_header *h = ev->rec;
    const char *s;
    uint32_t n;
    char buf[256];
    (void)rs_kind_name(h->kind);
    (void)rs_reader_thread_name(r, ev->tid);
    (void)rs_reader_rel_ns(r, h->t_ns);
    switch (h->kind) {
    case RS_REC_ALLOC:
        rs_reader_format_addr(r, ((const rs_rec_alloc *)(const void *)h)->caller, buf, sizeof buf);
        break;
    case RS_REC_FREE:
        rs_reader_format_addr(r, ((const rs_rec_free *)(const void *)h)->caller, buf, sizeof buf);
        break;
    case RS_REC_SITE:
        rs_reader_format_addr(r, ((const rs_rec_site *)(const void *)h)->caller, buf, sizeof buf);
        break;
    case RS_REC_OOM: {
        const unsigned char *fr = (const unsigned char *)h + sizeof(rs_rec_oom);
        for (uint32_t i = 0; i < h->aux; i++) {
            uint64_t pc;
            __builtin_memcpy(&pc, fr + 8u * i, 8);
            rs_reader_format_addr(r, pc, buf, sizeof buf);
        }
        break;
    }
    case RS_REC_STRING: {
        const rs_rec_string *st = (const void *)h;
        touch_text((const char *)(st + 1), st->len);
        break;
    }
    case RS_REC_NVTX_PUSH:
    case RS_REC_NVTX_START:
    case RS_REC_NVTX_MARK:
    case RS_REC_NVTX_DOMAIN: {
        const rs_rec_nvtx_name *nm = (const void *)h;
        if (rs_reader_domain(r, nm->domain, &s, &n))
            touch_text(s, n);
        if (nm->name_id && rs_reader_string(r, nm->name_id, &s, &n))
            touch_text(s, n);
        touch_text((const char *)(nm + 1), nm->text_len);
        break;
    }
    case RS_REC_META: {
        const rs_rec_meta *m = (const void *)h;
        touch_text((const char *)(m + 1), m->len);
        break;
    }
    case RS_REC_MODULE: {
        const rs_rec_module *m = (const void *)h;
        touch_text((const char *)(m + 1), m->build_id_len + m->path_len);
        break;
    }
    default:
        break;
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rs_reader *r;
    char err[640];
    if (rs_reader_open_mem(data, size, "fuzz", &r, err, sizeof err) != RS_READ_OK)
        return 0;
    for (size_t i = 0; i < rs_reader_warning_count(r); i++)
        (void)rs_reader_warning(r, i);
    for (size_t i = 0; i < rs_reader_meta_count(r); i++) {
        uint32_t key, len;
        const char *v;
        if (rs_reader_meta(r, i, &key, &v, &len))
            touch_text(v, len);
    }
    rs_iter *it = rs_iter_new(r);
    if (it) {
        rs_event ev;
        while (rs_iter_next(it, &ev) > 0)
            touch_event(r, &ev);
        rs_iter_free(it);
    }
    rs_reader_close(r);
    return 0;
}
