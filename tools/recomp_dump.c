/* recomp_dump.c: recomp-dump, one line per record of recompshim traces.
 *
 * Usage: recomp-dump [--kind K,...] [--thread TID] [--from T] [--to T]
 *                    [--range NAME] [--jsonl] [--symbols] TRACE...|RUNDIR...
 * Prints each trace's header, then every record in time order
 * (docs/trace-format.md shows the exact text; tests assert on it), or with
 * --jsonl one JSON object per line (the header, then one per record, the same
 * fields). A directory stands for the *.rstrace files in it, sorted by name.
 * Exit status: 0 success (warnings on stderr), 1 usage error or unreadable
 * file, 2 damaged or invalid trace (one line "recomp-dump: FILE: offset N:
 * ..." on stderr; the other files are still dumped).
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "symbolize.h"
#include "trace_reader.h"

#define EXIT_USAGE 1
#define EXIT_INVALID 2

/* ---- output: the same fields as text (" key=value") or JSON (,"key":value) ---- */

typedef struct out {
    FILE *f;
    int json;
    int symbols;            /* --symbols: name OOM frames (symbolize.h) */
    am_symbolizer *sym;     /* of the current file */
} out;

static const char *
nz(const char *s)
{
    return s ? s : "(null)";
}

/* A JSON string body: quotes, backslashes and control/non-ASCII bytes escaped. */
static void
json_esc(FILE *f, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c == '\t')
            fputs("\\t", f);
        else if (c < 0x20 || c >= 0x7f)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
}

static void
key(out *o, const char *k)
{
    if (o->json)
        fprintf(o->f, ",\"%s\":", k);
    else
        fprintf(o->f, " %s=", k);
}

static void
kv_u(out *o, const char *k, uint64_t v)
{
    key(o, k);
    fprintf(o->f, "%" PRIu64, v);
}

static void
kv_d(out *o, const char *k, int64_t v)
{
    key(o, k);
    fprintf(o->f, "%" PRId64, v);
}

/* 0x-hex: a JSON string (addresses exceed a double's 53 bits). */
static void
kv_x(out *o, const char *k, uint64_t v)
{
    key(o, k);
    fprintf(o->f, o->json ? "\"0x%" PRIx64 "\"" : "0x%" PRIx64, v);
}

/* A word (a name from the format's tables, yes/no): bare in text. */
static void
kv_w(out *o, const char *k, const char *w)
{
    key(o, k);
    if (o->json) {
        fputc('"', o->f);
        json_esc(o->f, w, strlen(w));
        fputc('"', o->f);
    } else {
        fputs(w, o->f);
    }
}

/* Recorded text: quoted (quoted=1) or bare and escaped in text; a JSON string. */
static void
kv_text(out *o, const char *k, const char *s, size_t n, int quoted)
{
    key(o, k);
    if (o->json) {
        fputc('"', o->f);
        json_esc(o->f, s, n);
        fputc('"', o->f);
        return;
    }
    if (quoted)
        fputc('"', o->f);
    if (n)
        rs_fput_escaped(o->f, s, n);
    if (quoted)
        fputc('"', o->f);
}

/* A flag: yes/no in text, true/false in JSON. */
static void
kv_b(out *o, const char *k, int v)
{
    key(o, k);
    fputs(o->json ? (v ? "true" : "false") : (v ? "yes" : "no"), o->f);
}

/* A fixed-size header string: bounded, escaped; "-" (JSON null) when empty. */
static void
kv_field(out *o, const char *k, const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);
    if (n) {
        kv_text(o, k, s, n, 0);
    } else if (o->json) {
        key(o, k);
        fputs("null", o->f);
    } else {
        kv_w(o, k, "-");
    }
}

/* The start of an object (JSON) or of a line "WORD" (text). */
static void
begin(out *o, const char *file, const char *kind)
{
    if (o->json) {
        fputs("{\"file\":\"", o->f);
        json_esc(o->f, file, strlen(file));
        fprintf(o->f, "\",\"kind\":\"%s\"", kind);
    } else {
        fputs(kind, o->f);
    }
}

static void
end(out *o)
{
    fputs(o->json ? "}\n" : "\n", o->f);
}

/* Text only: the header's fields continue on a new "header" line. */
static void
header_line(out *o)
{
    if (!o->json)
        fputs("\nheader", o->f);
}

static void
dump_header(out *o, const rs_reader *r)
{
    const rs_file_header *h = rs_reader_header(r);
    if (o->json) {
        begin(o, rs_reader_path(r), "HEADER");
        key(o, "version");
        fprintf(o->f, "\"%u.%u\"", h->version_major, h->version_minor);
    } else {
        fprintf(o->f, "recompshim trace v%u.%u %s\nheader", h->version_major, h->version_minor,
                rs_reader_path(r));
    }
    kv_field(o, "host", h->host, sizeof h->host);
    kv_d(o, "pid", h->pid);
    kv_d(o, "ppid", h->ppid);
    kv_b(o, "closed", rs_reader_closed(r));
    int via, status;
    rs_reader_exit(r, &via, &status);
    if (via) { /* v1.6: left through _exit/_Exit, sealed with its status */
        kv_w(o, "exit", rs_exit_via_name((uint32_t)via));
        kv_d(o, "exit_status", status);
    }
    header_line(o);
    kv_d(o, "rank", h->rank);
    kv_d(o, "local_rank", h->local_rank);
    kv_d(o, "world_size", h->world_size);
    kv_d(o, "local_world_size", h->local_world_size);
    kv_w(o, "rank_source", nz(rs_rank_source_name(h->rank_source)));
    header_line(o);
    if (!o->json)
        fputs(" job", o->f);
    kv_field(o, "torchelastic_run_id", h->torchelastic_run_id, sizeof h->torchelastic_run_id);
    kv_d(o, "restart_count", h->restart_count);
    kv_field(o, "slurm_job_id", h->slurm_job_id, sizeof h->slurm_job_id);
    kv_field(o, "master", h->master, sizeof h->master);
    kv_field(o, "run_id", h->run_id, sizeof h->run_id);
    header_line(o);
    kv_d(o, "device", h->device);
    kv_u(o, "capacity", h->device_capacity);
    kv_w(o, "mode", nz(rs_mode_name(h->mode)));
    kv_u(o, "runtime_version", h->cuda_runtime_version);
    kv_field(o, "shim_version", h->shim_version, sizeof h->shim_version);
    kv_b(o, "nvtx_foreign", (h->flags & RS_HDR_NVTX_FOREIGN) != 0);
    header_line(o);
    kv_u(o, "max_bytes", h->max_bytes);
    kv_b(o, "limit_hit", (h->flags & RS_HDR_LIMIT_HIT) != 0);
    kv_u(o, "dropped", h->dropped_records);
    kv_u(o, "reserved_chunks", h->reserved_chunks);
    if (h->window_kind == RS_WINDOW_NONE) {
        kv_w(o, "window", "none");
    } else {
        char w[96];
        snprintf(w, sizeof w, "%s:%" PRIu64 "-%" PRIu64, nz(rs_window_kind_name(h->window_kind)),
                 h->window_a, h->window_b);
        kv_w(o, "window", w);
    }
    kv_u(o, "chunks", h->chunks_published);
    end(o);
}

/* domain=default, the registered name, or #ID when the name is unknown. */
static void
put_domain(out *o, const rs_reader *r, uint32_t domain)
{
    const char *name;
    uint32_t len;
    char id[16];
    if (domain == 0) {
        kv_w(o, "domain", "default");
    } else if (rs_reader_domain(r, domain, &name, &len)) {
        kv_text(o, "domain", name, len, 0);
    } else {
        snprintf(id, sizeof id, "#%" PRIu32, domain);
        kv_w(o, "domain", id);
    }
}

/* The range name of an NVTX record: the string table (name_id) or inline text;
 * NULL when the id is not in the table. */
static const char *
nvtx_name(const rs_reader *r, const rs_rec_nvtx_name *n, uint32_t *len)
{
    const char *text;
    if (n->name_id == 0) {
        *len = n->text_len;
        return (const char *)(n + 1);
    }
    return rs_reader_string(r, n->name_id, &text, len) ? text : NULL;
}

static void
put_nvtx_name(out *o, const rs_reader *r, const rs_rec_nvtx_name *n)
{
    uint32_t len;
    const char *text = nvtx_name(r, n, &len);
    char id[16];
    if (text) {
        kv_text(o, "name", text, len, 1);
    } else {
        snprintf(id, sizeof id, "#%" PRIu32, n->name_id);
        kv_w(o, "name", id);
    }
}

static void
put_caller_lib(out *o, const rs_reader *r, uint64_t caller)
{
    char buf[512];
    if (rs_reader_format_addr(r, caller, buf, sizeof buf))
        kv_w(o, "caller_lib", buf);
}

/* (1.3) The Python stack an allocation was made in, when there is one:
 * pystack=ID, then text "\n  py #I NAME (FILE:LINE)" lines, innermost
 * first, JSON a "pyframes" array of {"name","file","line"}. A stack id
 * without its definitions prints "  py #I ?" once. */
static void
put_pystack(out *o, const rs_reader *r, uint32_t id)
{
    if (!id)
        return;
    kv_u(o, "pystack", id);
    if (o->json)
        fputs(",\"pyframes\":[", o->f);
    uint32_t parent, frame, i = 0;
    for (; id && rs_reader_pystack(r, id, &parent, &frame); i++, id = parent) {
        rs_pyframe_info fi = {"?", "?", 1, 1, 0};
        (void)rs_reader_pyframe(r, frame, &fi);
        if (o->json) {
            fprintf(o->f, "%s{\"name\":\"", i ? "," : "");
            json_esc(o->f, fi.name, fi.name_len);
            fputs("\",\"file\":\"", o->f);
            json_esc(o->f, fi.file, fi.file_len);
            fprintf(o->f, "\",\"line\":%" PRIu32 "}", fi.line);
        } else {
            fprintf(o->f, "\n  py #%" PRIu32 " ", i);
            rs_fput_escaped(o->f, fi.name, fi.name_len);
            fputs(" (", o->f);
            rs_fput_escaped(o->f, fi.file, fi.file_len);
            fprintf(o->f, ":%" PRIu32 ")", fi.line);
        }
    }
    if (id && !o->json)
        fprintf(o->f, "\n  py #%" PRIu32 " ?", i);
    if (o->json)
        fputc(']', o->f);
}

/* ---- one step per record kind ---- */

static void
dump_alloc(out *o, const rs_reader *r, const rs_rec_alloc *a)
{
    kv_w(o, "api", nz(rs_api_name(a->api)));
    kv_w(o, "mem", nz(rs_mem_name(a->mem)));
    kv_d(o, "dev", a->device);
    kv_x(o, "ptr", a->ptr);
    kv_u(o, "size", a->size);
    kv_x(o, "stream", a->stream);
    kv_x(o, "caller", a->caller);
    kv_d(o, "status", a->status);
    put_caller_lib(o, r, a->caller);
    put_pystack(o, r, a->h.aux);
}

static void
dump_free(out *o, const rs_reader *r, const rs_rec_free *a)
{
    kv_w(o, "api", nz(rs_api_name(a->api)));
    kv_w(o, "mem", nz(rs_mem_name(a->mem)));
    kv_d(o, "dev", a->device);
    kv_x(o, "ptr", a->ptr);
    kv_x(o, "stream", a->stream);
    kv_x(o, "caller", a->caller);
    kv_d(o, "status", a->status);
    put_caller_lib(o, r, a->caller);
}

static void
dump_meminfo(out *o, const rs_rec_meminfo *m)
{
    kv_w(o, "reason", nz(rs_meminfo_reason_name(m->h.aux)));
    kv_d(o, "dev", m->device);
    kv_u(o, "free", m->free_bytes);
    kv_u(o, "total", m->total_bytes);
    kv_d(o, "status", m->status);
}

/* The OOM's fields, then its native stack: text "\n  frame #I 0xPC [module+off]"
 * lines, JSON a "frames" array of {"pc","at"}. */
static void
dump_oom(out *o, const rs_reader *r, const rs_rec_oom *x)
{
    uint32_t nframes = x->h.aux;
    kv_w(o, "api", nz(rs_api_name(x->api)));
    kv_w(o, "mem", nz(rs_mem_name(x->mem)));
    kv_d(o, "dev", x->device);
    kv_u(o, "size", x->size);
    kv_d(o, "status", x->status);
    kv_u(o, "free", x->free_bytes);
    kv_u(o, "total", x->total_bytes);
    kv_d(o, "meminfo_status", x->meminfo_status);
    kv_x(o, "caller", x->caller);
    kv_u(o, "frames", nframes);
    if (o->json)
        fputs(",\"stack\":[", o->f);
    const unsigned char *fr = (const unsigned char *)(x + 1);
    for (uint32_t i = 0; i < nframes; i++) {
        uint64_t pc;
        char buf[512];
        memcpy(&pc, fr + 8u * i, 8);
        const rs_module_info *m = o->sym ? rs_reader_find_module(r, pc) : NULL;
        if (m)
            am_sym_format(o->sym, m, pc, buf, sizeof buf);
        else if (!rs_reader_format_addr(r, pc, buf, sizeof buf))
            strcpy(buf, "?");
        if (o->json) {
            fprintf(o->f, "%s{\"pc\":\"0x%" PRIx64 "\",\"at\":\"", i ? "," : "", pc);
            json_esc(o->f, buf, strlen(buf));
            fputs("\"}", o->f);
        } else {
            fprintf(o->f, "\n  frame #%" PRIu32 " 0x%" PRIx64 " [%s]", i, pc, buf);
        }
    }
    if (o->json)
        fputc(']', o->f);
    put_pystack(o, r, x->pystack);
}

static void
dump_thread(out *o, const rs_rec_thread *t)
{
    kv_u(o, "thread_tid", t->tid);
    kv_x(o, "pthread", t->pthread);
    kv_text(o, "name", t->name, strnlen(t->name, RS_THREAD_NAME_LEN), 1);
    kv_u(o, "rename", t->h.aux);
}

static void
dump_nvtx(out *o, const rs_reader *r, const rs_record_header *h)
{
    const rs_rec_nvtx_name *n = (const void *)h;
    switch ((enum rs_record_kind)h->kind) {
    case RS_REC_NVTX_PUSH:
        put_domain(o, r, n->domain);
        put_nvtx_name(o, r, n);
        kv_u(o, "depth", h->aux & ~RS_NVTX_PRE_TRACE);
        kv_u(o, "category", n->category);
        if (h->aux & RS_NVTX_PRE_TRACE)
            kv_u(o, "pre_trace", 1);
        break;
    case RS_REC_NVTX_POP:
        put_domain(o, r, ((const rs_rec_nvtx_pop *)(const void *)h)->domain);
        kv_u(o, "depth", h->aux);
        break;
    case RS_REC_NVTX_START:
        kv_u(o, "id", n->range_id);
        put_domain(o, r, n->domain);
        put_nvtx_name(o, r, n);
        break;
    case RS_REC_NVTX_END:
        kv_u(o, "id", ((const rs_rec_nvtx_end *)(const void *)h)->range_id);
        break;
    case RS_REC_NVTX_MARK:
        put_domain(o, r, n->domain);
        put_nvtx_name(o, r, n);
        break;
    case RS_REC_NVTX_DOMAIN:
        kv_u(o, "id", n->domain);
        put_nvtx_name(o, r, n);
        break;
    default:
        break;
    }
}

/* key=NAME value="..."; the command line's NUL-separated arguments as spaces. */
static void
dump_meta(out *o, const rs_rec_meta *m)
{
    const char *v = (const char *)(m + 1);
    uint32_t len = m->len;
    kv_w(o, "key", nz(rs_meta_key_name(m->key)));
    if (m->key != RS_META_CMDLINE) {
        kv_text(o, "value", v, len, 1);
        return;
    }
    while (len && v[len - 1] == '\0')
        len--;
    char *s = malloc(len + 1);
    if (!s) {
        kv_text(o, "value", "", 0, 1);
        return;
    }
    for (uint32_t i = 0; i < len; i++)
        s[i] = v[i] ? v[i] : ' ';
    kv_text(o, "value", s, len, 1);
    free(s);
}

static void
dump_module(out *o, const rs_rec_module *m)
{
    const unsigned char *bid = (const unsigned char *)(m + 1);
    char hex[2 * 255 + 2] = "-";
    for (uint32_t i = 0; i < m->build_id_len && i < 255; i++)
        snprintf(hex + 2 * i, 3, "%02x", bid[i]);
    kv_x(o, "base", m->base);
    kv_x(o, "lo", m->lo);
    kv_x(o, "hi", m->hi);
    kv_w(o, "build_id", hex);
    kv_text(o, "path", (const char *)bid + m->build_id_len, m->path_len, 1);
}

static void
dump_window(out *o, const rs_rec_window *w)
{
    kv_w(o, "state", w->h.aux == RS_WINDOW_OPEN ? "open" : "close");
    kv_w(o, "kind", nz(rs_window_kind_name(w->window_kind)));
    kv_u(o, "value", w->value);
}

static void
dump_vmm(out *o, const rs_reader *r, const rs_rec_vmm *v)
{
    kv_w(o, "api", nz(rs_api_name(v->api)));
    kv_d(o, "dev", v->device);
    kv_x(o, "handle", v->handle);
    kv_x(o, "ptr", v->ptr);
    kv_u(o, "size", v->size);
    kv_u(o, "offset", v->offset);
    kv_x(o, "caller", v->caller);
    kv_d(o, "status", v->status);
    put_caller_lib(o, r, v->caller);
}

static void
dump_tensor(out *o, const rs_reader *r, const rs_rec_tensor *t)
{
    kv_x(o, "ptr", t->ptr);
    kv_d(o, "size", t->size);
    kv_u(o, "allocated", t->total_allocated);
    kv_u(o, "reserved", t->total_reserved);
    kv_d(o, "device_type", t->device_type);
    kv_d(o, "dev", t->device);
    kv_x(o, "caller", t->caller);
    kv_u(o, "signature", t->h.aux);
    put_caller_lib(o, r, t->caller);
    put_pystack(o, r, t->pystack);
}

static void
dump_graph(out *o, const rs_rec_graph *g)
{
    kv_w(o, "op", nz(rs_graph_op_name(g->h.aux)));
    kv_w(o, "api", nz(rs_api_name(g->api)));
    kv_x(o, "stream", g->stream);
    kv_x(o, "graph", g->graph);
    kv_x(o, "exec", g->exec);
    kv_u(o, "mode", g->mode);
    kv_d(o, "status", g->status);
}

static void
dump_collective(out *o, const rs_rec_collective *c)
{
    kv_w(o, "op", nz(rs_coll_op_name(c->h.aux)));
    kv_w(o, "api", nz(rs_api_name(c->api)));
    kv_x(o, "comm", c->comm);
    kv_u(o, "count", c->count);
    kv_u(o, "bytes", c->bytes);
    kv_x(o, "stream", c->stream);
    kv_d(o, "datatype", c->datatype);
    kv_d(o, "redop", c->redop);
    kv_d(o, "peer", c->peer);
    kv_d(o, "nranks", c->nranks);
    kv_d(o, "rank", c->rank);
    kv_x(o, "comm_hash", c->comm_hash);
    kv_d(o, "status", c->status);
}

/* One record: the kind, time (ns since the trace started) and thread, then
 * the kind's own fields. A flat dispatch over record kinds. */
static void
dump_record(out *o, const rs_reader *r, const rs_event *ev)
{
    const rs_record_header *h = ev->rec;
    const void *p = h;
    begin(o, rs_reader_path(r), nz(rs_kind_name(h->kind)));
    kv_d(o, "t", rs_reader_rel_ns(r, h->t_ns));
    kv_u(o, "tid", ev->tid);
    switch ((enum rs_record_kind)h->kind) {
    case RS_REC_ALLOC: dump_alloc(o, r, p); break;
    case RS_REC_FREE: dump_free(o, r, p); break;
    case RS_REC_MEMINFO: dump_meminfo(o, p); break;
    case RS_REC_SET_DEVICE: {
        const rs_rec_set_device *s = p;
        kv_d(o, "dev", s->device);
        kv_d(o, "status", s->status);
        break;
    }
    case RS_REC_OOM: dump_oom(o, r, p); break;
    case RS_REC_THREAD: dump_thread(o, p); break;
    case RS_REC_STRING: {
        const rs_rec_string *s = p;
        kv_u(o, "id", s->id);
        kv_text(o, "text", (const char *)(s + 1), s->len, 1);
        break;
    }
    case RS_REC_NVTX_PUSH:
    case RS_REC_NVTX_POP:
    case RS_REC_NVTX_START:
    case RS_REC_NVTX_END:
    case RS_REC_NVTX_MARK:
    case RS_REC_NVTX_DOMAIN: dump_nvtx(o, r, h); break;
    case RS_REC_META: dump_meta(o, p); break;
    case RS_REC_MODULE: dump_module(o, p); break;
    case RS_REC_LIMIT: kv_u(o, "max_bytes", ((const rs_rec_limit *)p)->max_bytes); break;
    case RS_REC_WINDOW: dump_window(o, p); break;
#if RS_TRACE_VERSION_MINOR >= 1
    case RS_REC_VMM_CREATE:
    case RS_REC_VMM_RELEASE:
    case RS_REC_VMM_MAP:
    case RS_REC_VMM_UNMAP:
    case RS_REC_VA_RESERVE:
    case RS_REC_VA_FREE: dump_vmm(o, r, p); break;
    case RS_REC_TENSOR: dump_tensor(o, r, p); break;
    case RS_REC_GRAPH: dump_graph(o, p); break;
    case RS_REC_COLLECTIVE: dump_collective(o, p); break;
    case RS_REC_CTX_SET: {
        const rs_rec_ctx *c = p;
        kv_x(o, "ctx", c->ctx);
        kv_d(o, "dev", c->device);
        kv_d(o, "status", c->status);
        break;
    }
#endif
#if RS_TRACE_VERSION_MINOR >= 3
    case RS_REC_PYFRAME: {
        const rs_pyframe_info fi0 = {"?", "?", 1, 1, 0};
        rs_pyframe_info fi = fi0;
        const rs_rec_pyframe *f = p;
        (void)rs_reader_pyframe(r, f->id, &fi);
        kv_u(o, "id", f->id);
        kv_text(o, "name", fi.name, fi.name_len, 1);
        kv_text(o, "file", fi.file, fi.file_len, 1);
        kv_u(o, "line", f->line);
        break;
    }
    case RS_REC_PYSTACK: {
        const rs_rec_pystack *st = p;
        kv_u(o, "id", st->id);
        kv_u(o, "parent", st->parent);
        kv_u(o, "frame", st->frame);
        break;
    }
#endif
#if RS_TRACE_VERSION_MINOR >= 4
    case RS_REC_SITE: {
        const rs_rec_site *st = p;
        kv_u(o, "id", st->h.aux);
        kv_w(o, "api", nz(rs_api_name(st->api)));
        kv_w(o, "mem", nz(rs_mem_name(st->mem)));
        kv_d(o, "dev", st->device);
        kv_x(o, "stream", st->stream);
        kv_x(o, "caller", st->caller);
        break;
    }
    case RS_REC_ALLOC_C: /* the iterator hands these out expanded */
    case RS_REC_FREE_C:
        break;
#endif
#if RS_TRACE_VERSION_MINOR >= 5
    case RS_REC_ALLOC_P: /* expanded, as ALLOC_C */
    case RS_REC_FREE_P:
        break;
#endif
    case RS_REC_POOL_ATTR: {
        const rs_rec_pool_attr *a = p;
        kv_x(o, "pool", a->pool);
        kv_u(o, "attr", a->attr);
        kv_u(o, "value", a->value);
        kv_d(o, "status", a->status);
        break;
    }
    }
    end(o);
}

/* ---- filters ---- */

typedef struct filter {
    uint64_t kinds;     /* bit per record kind; 0: every kind */
    int64_t thread;     /* -1: every thread */
    int64_t from, to;   /* ns since the trace started, inclusive */
    const char *range;  /* substring of an enclosing NVTX range's name; NULL: any */
} filter;

/* Per-thread stack of pushed ranges (1: its name matches --range) and the
 * process-wide start/end ranges open with a matching name. */
typedef struct range_state {
    struct tstack {
        uint32_t tid;
        size_t n, cap;
        unsigned char *m;
    } *t;
    size_t nt;
    uint64_t *ids;
    size_t nids, capids;
} range_state;

static struct tstack *
tstack_of(range_state *rs, uint32_t tid)
{
    for (size_t i = 0; i < rs->nt; i++)
        if (rs->t[i].tid == tid)
            return &rs->t[i];
    void *q = realloc(rs->t, (rs->nt + 1) * sizeof *rs->t);
    if (!q)
        return NULL;
    rs->t = q;
    memset(&rs->t[rs->nt], 0, sizeof *rs->t);
    rs->t[rs->nt].tid = tid;
    return &rs->t[rs->nt++];
}

static int
tstack_push(struct tstack *s, unsigned char m)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        void *q = realloc(s->m, cap);
        if (!q)
            return -1;
        s->m = q;
        s->cap = cap;
    }
    s->m[s->n++] = m;
    return 0;
}

static int
tstack_any(const struct tstack *s)
{
    for (size_t i = 0; s && i < s->n; i++)
        if (s->m[i])
            return 1;
    return 0;
}

static void
range_state_free(range_state *rs)
{
    for (size_t i = 0; i < rs->nt; i++)
        free(rs->t[i].m);
    free(rs->t);
    free(rs->ids);
    memset(rs, 0, sizeof *rs);
}

static int
name_matches(const rs_reader *r, const rs_record_header *h, const char *want)
{
    uint32_t len;
    const char *name = nvtx_name(r, (const void *)h, &len);
    if (!name)
        return 0;
    size_t wl = strlen(want);
    for (size_t i = 0; i + wl <= len; i++)
        if (!memcmp(name + i, want, wl))
            return 1;
    return 0;
}

/* Is the record inside a range named like --range? A matching push or start
 * is inside its own range, and so is its pop or end. Updates the state. */
static int
in_range(range_state *rs, const rs_reader *r, const rs_event *ev, const char *want)
{
    const rs_record_header *h = ev->rec;
    struct tstack *s = tstack_of(rs, ev->tid);
    int inside = tstack_any(s) || rs->nids > 0;
    if (h->kind == RS_REC_NVTX_PUSH) {
        int m = name_matches(r, h, want);
        if (s)
            tstack_push(s, (unsigned char)m);
        return inside || m;
    }
    if (h->kind == RS_REC_NVTX_POP) {
        if (s && s->n)
            s->n--;
        return inside;
    }
    if (h->kind == RS_REC_NVTX_START && name_matches(r, h, want)) {
        if (rs->nids == rs->capids) {
            size_t cap = rs->capids ? 2 * rs->capids : 16;
            void *q = realloc(rs->ids, cap * sizeof *rs->ids);
            if (!q)
                return inside;
            rs->ids = q;
            rs->capids = cap;
        }
        rs->ids[rs->nids++] = ((const rs_rec_nvtx_name *)(const void *)h)->range_id;
        return 1;
    }
    if (h->kind == RS_REC_NVTX_END) {
        uint64_t id = ((const rs_rec_nvtx_end *)(const void *)h)->range_id;
        for (size_t i = 0; i < rs->nids; i++)
            if (rs->ids[i] == id) {
                rs->ids[i] = rs->ids[--rs->nids];
                return 1;
            }
    }
    return inside;
}

static int
keep(const filter *fl, range_state *rs, const rs_reader *r, const rs_event *ev)
{
    const rs_record_header *h = ev->rec;
    int inside = fl->range ? in_range(rs, r, ev, fl->range) : 1;
    if (fl->kinds && (h->kind >= 64 || !(fl->kinds & (1ull << h->kind))))
        return 0;
    if (fl->thread >= 0 && ev->tid != (uint64_t)fl->thread)
        return 0;
    int64_t t = rs_reader_rel_ns(r, h->t_ns);
    return t >= fl->from && t <= fl->to && inside;
}

/* ---- one file ---- */

static int
dump_file(out *o, const char *path, const filter *fl)
{
    char err[640];
    rs_reader *r;
    int rc = rs_reader_open(path, &r, err, sizeof err);
    if (rc != RS_READ_OK) {
        fprintf(stderr, "recomp-dump: %s\n", err);
        return rc == RS_READ_ESYS ? EXIT_USAGE : EXIT_INVALID;
    }
    for (size_t i = 0; i < rs_reader_warning_count(r); i++)
        fprintf(stderr, "recomp-dump: warning: %s\n", rs_reader_warning(r, i));
    dump_header(o, r);
    rs_iter *it = rs_iter_new(r);
    if (!it) {
        fprintf(stderr, "recomp-dump: %s: out of memory\n", path);
        rs_reader_close(r);
        return EXIT_USAGE;
    }
    range_state rs = {0};
    rs_event ev;
    int st;
    if (o->symbols)
        o->sym = am_sym_new();
    while ((st = rs_iter_next(it, &ev)) > 0)
        if (keep(fl, &rs, r, &ev))
            dump_record(o, r, &ev);
    am_sym_free(o->sym);
    o->sym = NULL;
    int status = 0;
    if (st < 0) {
        fflush(o->f);
        fprintf(stderr, "recomp-dump: %s\n", rs_reader_error(r));
        status = EXIT_INVALID;
    }
    range_state_free(&rs);
    rs_iter_free(it);
    rs_reader_close(r);
    return status;
}

/* ---- command line ---- */

static void
usage(FILE *f)
{
    fprintf(f,
            "usage: recomp-dump [--kind K[,K...]] [--thread TID] [--from T] [--to T]\n"
            "                   [--range NAME] [--jsonl] [--symbols] TRACE...|RUNDIR...\n"
            "       recomp-dump --help | --version\n"
            "  Print recompshim traces: each file's header, then one line per record in\n"
            "  time order. A directory stands for the *.rstrace files in it (a run\n"
            "  directory), by name.\n"
            "  --kind K,...    only these record kinds (ALLOC, FREE, OOM, NVTX_PUSH, TENSOR,\n"
            "                  COLLECTIVE, ...; the first word of each line; any case)\n"
            "  --thread TID    only records of this thread (the tid= field)\n"
            "  --from T        only records at or after T, time since the trace started\n"
            "  --to T          only records at or before T (T: ns, or with a unit: 1.5s,\n"
            "                  20ms, 300us, 1000ns)\n"
            "  --range NAME    only records inside an NVTX range whose name contains NAME\n"
            "                  (push/pop ranges of the record's thread, start/end ranges)\n"
            "  --jsonl         one JSON object per line: the header, then one per record\n"
            "                  (the same fields; addresses as \"0x...\" strings)\n"
            "  --symbols       name an OOM's frames: module+0xOFF in function+0xN at\n"
            "                  file:line, from the recorded modules (as recomp-analyze does)\n"
            "  -h, --help      this text on stdout\n"
            "  --version       the project version and the trace format version it reads\n"
            "exit: 0 ok, 1 usage or unreadable file, 2 damaged or invalid trace\n");
}

/* Time since the trace started: a number of ns, or with a unit s/ms/us/ns. */
static int
parse_time(const char *s, int64_t *ns)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0)
        return -1;
    double m;
    if (!*end || !strcmp(end, "ns"))
        m = 1;
    else if (!strcmp(end, "us"))
        m = 1e3;
    else if (!strcmp(end, "ms"))
        m = 1e6;
    else if (!strcmp(end, "s"))
        m = 1e9;
    else
        return -1;
    if (v * m > 9.2e18)
        return -1;
    *ns = (int64_t)(v * m);
    return 0;
}

/* "ALLOC,free,oom" into a bit per kind; the unknown name in *bad. */
static int
parse_kinds(const char *s, uint64_t *bits, char *bad, size_t badlen)
{
    char *copy = strdup(s), *save = NULL;
    if (!copy)
        return -1;
    int rc = 0;
    for (char *k = strtok_r(copy, ",", &save); k; k = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (uint32_t i = 1; i < 64; i++) {
            const char *n = rs_kind_name(i);
            if (n && !strcasecmp(n, k)) {
                *bits |= 1ull << i;
                found = 1;
            }
        }
        if (!found) {
            snprintf(bad, badlen, "%s", k);
            rc = -1;
            break;
        }
    }
    free(copy);
    return rc;
}

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The *.rstrace files directly in dir, sorted by name; -1 if it cannot be read. */
static int
list_run_dir(const char *dir, char ***out, size_t *n)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    struct dirent *e;
    size_t cap = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 8 || strcmp(e->d_name + l - 8, ".rstrace") != 0)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            char **q = realloc(*out, cap * sizeof *q);
            if (!q)
                break;
            *out = q;
        }
        size_t pl = strlen(dir) + l + 2;
        if (!((*out)[*n] = malloc(pl)))
            break;
        snprintf((*out)[*n], pl, "%s/%s", dir, e->d_name);
        (*n)++;
    }
    closedir(d);
    if (*n)
        qsort(*out, *n, sizeof **out, cmp_str);
    return 0;
}

/* Dump one argument: a trace file or a run directory. */
static int
dump_arg(out *o, const char *arg, const filter *fl)
{
    struct stat st;
    if (stat(arg, &st) != 0 || !S_ISDIR(st.st_mode))
        return dump_file(o, arg, fl);
    char **files = NULL;
    size_t n = 0;
    if (list_run_dir(arg, &files, &n) < 0) {
        fprintf(stderr, "recomp-dump: %s: cannot open directory: %s\n", arg, strerror(errno));
        return EXIT_USAGE;
    }
    int rc = 0;
    if (!n) {
        fprintf(stderr, "recomp-dump: %s: no *.rstrace files in this directory\n", arg);
        rc = EXIT_USAGE;
    }
    for (size_t i = 0; i < n; i++) {
        int r = dump_file(o, files[i], fl);
        rc = r > rc ? r : rc;
        free(files[i]);
    }
    free(files);
    return rc;
}

static int
bad_usage(const char *fmt, const char *arg)
{
    fputs("recomp-dump: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\n(recomp-dump --help for usage)\n", stderr);
    return EXIT_USAGE;
}

int
main(int argc, char **argv)
{
    filter fl = {0, -1, INT64_MIN, INT64_MAX, NULL};
    out o = {stdout, 0};
    static const struct option lo[] = {
        {"kind", required_argument, 0, 'k'}, {"thread", required_argument, 0, 'T'},
        {"from", required_argument, 0, 'f'}, {"to", required_argument, 0, 't'},
        {"range", required_argument, 0, 'R'}, {"jsonl", no_argument, 0, 'J'},
        {"help", no_argument, 0, 'h'},       {"version", no_argument, 0, 'V'},
        {"symbols", no_argument, 0, 'S'},
        {0, 0, 0, 0},
    };
    int c;
    char bad[128];
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'k':
            if (parse_kinds(optarg, &fl.kinds, bad, sizeof bad) < 0)
                return bad_usage("--kind: unknown record kind '%s'", bad);
            break;
        case 'T': {
            char *end;
            errno = 0;
            long long v = strtoll(optarg, &end, 10);
            if (errno || *end || end == optarg || v < 0 || v > UINT32_MAX)
                return bad_usage("--thread wants a thread id (the tid= field), got '%s'", optarg);
            fl.thread = v;
            break;
        }
        case 'f':
        case 't':
            if (parse_time(optarg, c == 'f' ? &fl.from : &fl.to) < 0)
                return bad_usage("--from/--to want a time such as 1500000, 1.5ms or 2s, got '%s'",
                                 optarg);
            break;
        case 'R':
            fl.range = optarg;
            break;
        case 'J':
            o.json = 1;
            break;
        case 'S':
            o.symbols = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("recomp-dump %s (recompshim trace format %d.%d)\n", RS_PROJECT_VERSION,
                   RS_TRACE_VERSION_MAJOR, RS_TRACE_VERSION_MINOR);
            return 0;
        default:
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return EXIT_USAGE;
    }
    int status = 0;
    for (int i = optind; i < argc; i++) {
        int r = dump_arg(&o, argv[i], &fl);
        status = r > status ? r : status;
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "recomp-dump: write error on stdout\n");
        return EXIT_USAGE;
    }
    return status;
}
