/* recomp_dump.c: recomp-dump, one line per record of a recompshim trace.
 *
 * Usage: recomp-dump TRACE
 * Prints the header, then every record in time order (docs/trace-format.md
 * shows the exact text; tests assert on it). Exit status: 0 success
 * (warnings on stderr), 1 usage error or unreadable file, 2 damaged or
 * invalid trace (one line "recomp-dump: FILE: offset N: ..." on stderr).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "trace_reader.h"

#define EXIT_USAGE 1
#define EXIT_INVALID 2

/* A fixed-size header string: bounded, escaped, "-" when empty. */
static void
put_field(FILE *f, const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);
    if (!n)
        fputc('-', f);
    else
        rs_fput_escaped(f, s, n);
}

static void
put_quoted(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    rs_fput_escaped(f, s, n);
    fputc('"', f);
}

static void
dump_header(FILE *f, const rs_reader *r)
{
    const rs_file_header *h = rs_reader_header(r);
    fprintf(f, "recompshim trace v%u.%u %s\n", h->version_major, h->version_minor,
            rs_reader_path(r));
    fputs("header host=", f);
    put_field(f, h->host, sizeof h->host);
    fprintf(f, " pid=%" PRId32 " ppid=%" PRId32 " closed=%s\n", h->pid, h->ppid,
            rs_reader_closed(r) ? "yes" : "no");
    fprintf(f, "header rank=%" PRId32 " local_rank=%" PRId32 " world_size=%" PRId32
               " local_world_size=%" PRId32 " rank_source=%s\n",
            h->rank, h->local_rank, h->world_size, h->local_world_size,
            rs_rank_source_name(h->rank_source));
    fputs("header job torchelastic_run_id=", f);
    put_field(f, h->torchelastic_run_id, sizeof h->torchelastic_run_id);
    fprintf(f, " restart_count=%" PRId32 " slurm_job_id=", h->restart_count);
    put_field(f, h->slurm_job_id, sizeof h->slurm_job_id);
    fputs(" master=", f);
    put_field(f, h->master, sizeof h->master);
    fputs(" run_id=", f);
    put_field(f, h->run_id, sizeof h->run_id);
    fprintf(f, "\nheader device=%" PRId32 " capacity=%" PRIu64 " mode=%s runtime_version=%" PRIu32
               " shim_version=",
            h->device, h->device_capacity, rs_mode_name(h->mode), h->cuda_runtime_version);
    put_field(f, h->shim_version, sizeof h->shim_version);
    fprintf(f, " nvtx_foreign=%s\n", (h->flags & RS_HDR_NVTX_FOREIGN) ? "yes" : "no");
    fprintf(f, "header max_bytes=%" PRIu64 " limit_hit=%s dropped=%" PRIu64
               " reserved_chunks=%" PRIu32 " window=",
            h->max_bytes, (h->flags & RS_HDR_LIMIT_HIT) ? "yes" : "no", h->dropped_records,
            h->reserved_chunks);
    if (h->window_kind == RS_WINDOW_NONE)
        fputs("none", f);
    else
        fprintf(f, "%s:%" PRIu64 "-%" PRIu64, rs_window_kind_name(h->window_kind), h->window_a,
                h->window_b);
    fprintf(f, " chunks=%" PRIu32 "\n", h->chunks_published);
}

static void
put_domain(FILE *f, const rs_reader *r, uint32_t domain)
{
    const char *name;
    uint32_t len;
    fputs(" domain=", f);
    if (domain == 0)
        fputs("default", f);
    else if (rs_reader_domain(r, domain, &name, &len))
        rs_fput_escaped(f, name, len);
    else
        fprintf(f, "#%" PRIu32, domain);
}

/* name="..." from the string table (name_id) or the inline text. */
static void
put_nvtx_name(FILE *f, const rs_reader *r, const rs_rec_nvtx_name *n)
{
    const char *text;
    uint32_t len;
    fputs(" name=", f);
    if (n->name_id == 0)
        put_quoted(f, (const char *)(n + 1), n->text_len);
    else if (rs_reader_string(r, n->name_id, &text, &len))
        put_quoted(f, text, len);
    else
        fprintf(f, "#%" PRIu32, n->name_id);
}

static void
put_caller_lib(FILE *f, const rs_reader *r, uint64_t caller)
{
    char buf[512];
    if (rs_reader_format_addr(r, caller, buf, sizeof buf))
        fprintf(f, " caller_lib=%s", buf);
}

static void
dump_record(FILE *f, const rs_reader *r, const rs_event *ev)
{
    const rs_record_header *h = ev->rec;
    fprintf(f, "%s t=%" PRId64 " tid=%" PRIu32, rs_kind_name(h->kind),
            rs_reader_rel_ns(r, h->t_ns), ev->tid);
    switch ((enum rs_record_kind)h->kind) {
    case RS_REC_ALLOC: {
        const rs_rec_alloc *a = (const void *)h;
        fprintf(f, " api=%s mem=%s dev=%d ptr=0x%" PRIx64 " size=%" PRIu64 " stream=0x%" PRIx64
                   " caller=0x%" PRIx64 " status=%" PRId32,
                rs_api_name(a->api), rs_mem_name(a->mem), a->device, a->ptr, a->size, a->stream,
                a->caller, a->status);
        put_caller_lib(f, r, a->caller);
        break;
    }
    case RS_REC_FREE: {
        const rs_rec_free *a = (const void *)h;
        fprintf(f, " api=%s mem=%s dev=%d ptr=0x%" PRIx64 " stream=0x%" PRIx64
                   " caller=0x%" PRIx64 " status=%" PRId32,
                rs_api_name(a->api), rs_mem_name(a->mem), a->device, a->ptr, a->stream, a->caller,
                a->status);
        put_caller_lib(f, r, a->caller);
        break;
    }
    case RS_REC_MEMINFO: {
        const rs_rec_meminfo *m = (const void *)h;
        fprintf(f, " reason=%s dev=%" PRId32 " free=%" PRIu64 " total=%" PRIu64 " status=%" PRId32,
                rs_meminfo_reason_name(h->aux), m->device, m->free_bytes, m->total_bytes,
                m->status);
        break;
    }
    case RS_REC_SET_DEVICE: {
        const rs_rec_set_device *s = (const void *)h;
        fprintf(f, " dev=%" PRId32 " status=%" PRId32, s->device, s->status);
        break;
    }
    case RS_REC_OOM: {
        const rs_rec_oom *o = (const void *)h;
        fprintf(f, " api=%s mem=%s dev=%d size=%" PRIu64 " status=%" PRId32 " free=%" PRIu64
                   " total=%" PRIu64 " meminfo_status=%" PRId32 " caller=0x%" PRIx64
                   " frames=%" PRIu32,
                rs_api_name(o->api), rs_mem_name(o->mem), o->device, o->size, o->status,
                o->free_bytes, o->total_bytes, o->meminfo_status, o->caller, h->aux);
        const unsigned char *fr = (const unsigned char *)(o + 1);
        for (uint32_t i = 0; i < h->aux; i++) {
            uint64_t pc;
            char buf[512];
            memcpy(&pc, fr + 8u * i, 8);
            if (!rs_reader_format_addr(r, pc, buf, sizeof buf))
                strcpy(buf, "?");
            fprintf(f, "\n  frame #%" PRIu32 " 0x%" PRIx64 " [%s]", i, pc, buf);
        }
        break;
    }
    case RS_REC_THREAD: {
        const rs_rec_thread *t = (const void *)h;
        fprintf(f, " thread_tid=%" PRIu32 " pthread=0x%" PRIx64 " name=", t->tid, t->pthread);
        put_quoted(f, t->name, strnlen(t->name, RS_THREAD_NAME_LEN));
        fprintf(f, " rename=%" PRIu32, h->aux);
        break;
    }
    case RS_REC_STRING: {
        const rs_rec_string *s = (const void *)h;
        fprintf(f, " id=%" PRIu32 " text=", s->id);
        put_quoted(f, (const char *)(s + 1), s->len);
        break;
    }
    case RS_REC_NVTX_PUSH: {
        const rs_rec_nvtx_name *n = (const void *)h;
        put_domain(f, r, n->domain);
        put_nvtx_name(f, r, n);
        fprintf(f, " depth=%" PRIu32 " category=%" PRIu32, h->aux & ~RS_NVTX_PRE_TRACE,
                n->category);
        if (h->aux & RS_NVTX_PRE_TRACE)
            fputs(" pre_trace=1", f);
        break;
    }
    case RS_REC_NVTX_POP: {
        const rs_rec_nvtx_pop *p = (const void *)h;
        put_domain(f, r, p->domain);
        fprintf(f, " depth=%" PRIu32, h->aux);
        break;
    }
    case RS_REC_NVTX_START: {
        const rs_rec_nvtx_name *n = (const void *)h;
        fprintf(f, " id=%" PRIu64, n->range_id);
        put_domain(f, r, n->domain);
        put_nvtx_name(f, r, n);
        break;
    }
    case RS_REC_NVTX_END: {
        const rs_rec_nvtx_end *e = (const void *)h;
        fprintf(f, " id=%" PRIu64, e->range_id);
        break;
    }
    case RS_REC_NVTX_MARK: {
        const rs_rec_nvtx_name *n = (const void *)h;
        put_domain(f, r, n->domain);
        put_nvtx_name(f, r, n);
        break;
    }
    case RS_REC_NVTX_DOMAIN: {
        const rs_rec_nvtx_name *n = (const void *)h;
        fprintf(f, " id=%" PRIu32, n->domain);
        put_nvtx_name(f, r, n);
        break;
    }
    case RS_REC_META: {
        const rs_rec_meta *m = (const void *)h;
        const char *v = (const char *)(m + 1);
        uint32_t len = m->len;
        fprintf(f, " key=%s value=\"", rs_meta_key_name(m->key));
        if (m->key == RS_META_CMDLINE) {
            /* NUL-separated arguments: drop the terminator, NULs as spaces */
            while (len && v[len - 1] == '\0')
                len--;
            for (uint32_t i = 0; i < len; i++) {
                if (v[i] == '\0')
                    fputc(' ', f);
                else
                    rs_fput_escaped(f, v + i, 1);
            }
        } else {
            rs_fput_escaped(f, v, len);
        }
        fputc('"', f);
        break;
    }
    case RS_REC_MODULE: {
        const rs_rec_module *m = (const void *)h;
        const unsigned char *bid = (const unsigned char *)(m + 1);
        fprintf(f, " base=0x%" PRIx64 " lo=0x%" PRIx64 " hi=0x%" PRIx64 " build_id=", m->base,
                m->lo, m->hi);
        if (!m->build_id_len)
            fputc('-', f);
        for (uint32_t i = 0; i < m->build_id_len; i++)
            fprintf(f, "%02x", bid[i]);
        fputs(" path=", f);
        put_quoted(f, (const char *)bid + m->build_id_len, m->path_len);
        break;
    }
    case RS_REC_LIMIT: {
        const rs_rec_limit *l = (const void *)h;
        fprintf(f, " max_bytes=%" PRIu64, l->max_bytes);
        break;
    }
    case RS_REC_WINDOW: {
        const rs_rec_window *w = (const void *)h;
        fprintf(f, " state=%s kind=%s value=%" PRIu64,
                h->aux == RS_WINDOW_OPEN ? "open" : "close", rs_window_kind_name(w->window_kind),
                w->value);
        break;
    }
#if RS_TRACE_VERSION_MINOR >= 1
    case RS_REC_VMM_CREATE:
    case RS_REC_VMM_RELEASE:
    case RS_REC_VMM_MAP:
    case RS_REC_VMM_UNMAP:
    case RS_REC_VA_RESERVE:
    case RS_REC_VA_FREE: {
        const rs_rec_vmm *v = (const void *)h;
        fprintf(f, " api=%s dev=%d handle=0x%" PRIx64 " ptr=0x%" PRIx64 " size=%" PRIu64
                   " offset=%" PRIu64 " caller=0x%" PRIx64 " status=%" PRId32,
                rs_api_name(v->api), v->device, v->handle, v->ptr, v->size, v->offset, v->caller,
                v->status);
        put_caller_lib(f, r, v->caller);
        break;
    }
    case RS_REC_TENSOR: {
        const rs_rec_tensor *t = (const void *)h;
        fprintf(f, " ptr=0x%" PRIx64 " size=%" PRId64 " allocated=%" PRIu64 " reserved=%" PRIu64
                   " device_type=%d dev=%d caller=0x%" PRIx64 " signature=%" PRIu32,
                t->ptr, t->size, t->total_allocated, t->total_reserved, t->device_type, t->device,
                t->caller, h->aux);
        put_caller_lib(f, r, t->caller);
        break;
    }
    case RS_REC_GRAPH: {
        const rs_rec_graph *g = (const void *)h;
        fprintf(f, " op=%s api=%s stream=0x%" PRIx64 " graph=0x%" PRIx64 " exec=0x%" PRIx64
                   " mode=%" PRIu32 " status=%" PRId32,
                rs_graph_op_name(h->aux), rs_api_name(g->api), g->stream, g->graph, g->exec,
                g->mode, g->status);
        break;
    }
    case RS_REC_COLLECTIVE: {
        const rs_rec_collective *c = (const void *)h;
        fprintf(f, " op=%s api=%s comm=0x%" PRIx64 " count=%" PRIu64 " bytes=%" PRIu64
                   " stream=0x%" PRIx64 " datatype=%d redop=%d peer=%" PRId32 " nranks=%" PRId32
                   " rank=%" PRId32 " comm_hash=0x%" PRIx64 " status=%" PRId32,
                rs_coll_op_name(h->aux), rs_api_name(c->api), c->comm, c->count, c->bytes,
                c->stream, c->datatype, c->redop, c->peer, c->nranks, c->rank, c->comm_hash,
                c->status);
        break;
    }
    case RS_REC_CTX_SET: {
        const rs_rec_ctx *c = (const void *)h;
        fprintf(f, " ctx=0x%" PRIx64 " dev=%" PRId32 " status=%" PRId32, c->ctx, c->device,
                c->status);
        break;
    }
#endif
    case RS_REC_POOL_ATTR: {
        const rs_rec_pool_attr *p = (const void *)h;
        fprintf(f, " pool=0x%" PRIx64 " attr=%" PRIu32 " value=%" PRIu64 " status=%" PRId32,
                p->pool, p->attr, p->value, p->status);
        break;
    }
    }
    fputc('\n', f);
}

int
main(int argc, char **argv)
{
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: recomp-dump TRACE\n"
                        "  print a recompshim trace: header, then one line per record in time "
                        "order\n");
        return EXIT_USAGE;
    }
    char err[640];
    rs_reader *r;
    int rc = rs_reader_open(argv[1], &r, err, sizeof err);
    if (rc != RS_READ_OK) {
        fprintf(stderr, "recomp-dump: %s\n", err);
        return rc == RS_READ_ESYS ? EXIT_USAGE : EXIT_INVALID;
    }
    for (size_t i = 0; i < rs_reader_warning_count(r); i++)
        fprintf(stderr, "recomp-dump: warning: %s\n", rs_reader_warning(r, i));

    dump_header(stdout, r);
    rs_iter *it = rs_iter_new(r);
    if (!it) {
        fprintf(stderr, "recomp-dump: %s: out of memory\n", argv[1]);
        rs_reader_close(r);
        return EXIT_USAGE;
    }
    rs_event ev;
    int st;
    while ((st = rs_iter_next(it, &ev)) > 0)
        dump_record(stdout, r, &ev);
    int status = 0;
    if (st < 0) {
        fflush(stdout);
        fprintf(stderr, "recomp-dump: %s\n", rs_reader_error(r));
        status = EXIT_INVALID;
    }
    rs_iter_free(it);
    rs_reader_close(r);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "recomp-dump: write error on stdout\n");
        return EXIT_USAGE;
    }
    return status;
}
