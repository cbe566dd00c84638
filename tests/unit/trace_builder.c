/* trace_builder.c: hand-built recompshim traces for tests. */
#include "trace_builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *
xcalloc(size_t n)
{
    void *p = calloc(1, n);
    if (!p) {
        fprintf(stderr, "trace_builder: out of memory\n");
        abort();
    }
    return p;
}

tb_trace *
tb_new(uint32_t chunk_size, uint32_t max_chunks)
{
    tb_trace *t = xcalloc(sizeof *t);
    t->chunk_size = chunk_size ? chunk_size : RS_CHUNK_SIZE;
    t->max_chunks = max_chunks;
    t->cap = RS_HEADER_SIZE + (size_t)max_chunks * t->chunk_size;
    t->buf = xcalloc(t->cap);
    rs_file_header *h = tb_header(t);
    memcpy(h->magic, RS_TRACE_MAGIC, RS_TRACE_MAGIC_LEN);
    h->version_major = RS_TRACE_VERSION_MAJOR;
    h->version_minor = RS_TRACE_VERSION_MINOR;
    h->header_size = RS_HEADER_SIZE;
    h->chunk_size = t->chunk_size;
    h->pid = 4242;
    h->ppid = 1;
    h->rank = h->local_rank = h->world_size = h->local_world_size = -1;
    h->restart_count = -1;
    h->device = 0;
    h->mono_start_ns = 1000000;
    h->real_start_ns = 1700000000000000000ull;
    strcpy(h->host, "node1");
    strcpy(h->shim_version, "0.1.0");
    return t;
}

void
tb_free(tb_trace *t)
{
    if (t) {
        free(t->buf);
        free(t);
    }
}

rs_file_header *
tb_header(tb_trace *t)
{
    return (rs_file_header *)(void *)t->buf;
}

uint64_t
tb_chunk_offset(const tb_trace *t, uint32_t index)
{
    return RS_HEADER_SIZE + (uint64_t)index * t->chunk_size;
}

rs_chunk_header *
tb_chunk_header(tb_trace *t, uint32_t index)
{
    return (rs_chunk_header *)(void *)(t->buf + tb_chunk_offset(t, index));
}

uint32_t
tb_chunk(tb_trace *t, uint32_t tid)
{
    if (t->nchunks >= t->max_chunks) {
        fprintf(stderr, "trace_builder: more than %u chunks\n", t->max_chunks);
        abort();
    }
    uint32_t k = t->nchunks++;
    rs_chunk_header *c = tb_chunk_header(t, k);
    c->magic = RS_CHUNK_MAGIC;
    c->index = k;
    c->tid = tid;
    return k;
}

uint64_t
tb_put(tb_trace *t, uint32_t index, const void *fixed, size_t fixed_len, const void *var,
       size_t var_len)
{
    rs_chunk_header *c = tb_chunk_header(t, index);
    size_t size = RS_RECORD_ROUND(fixed_len + var_len);
    if (c->used + size > t->chunk_size - sizeof *c) {
        fprintf(stderr, "trace_builder: chunk %u full\n", index);
        abort();
    }
    uint64_t off = tb_chunk_offset(t, index) + sizeof *c + c->used;
    unsigned char *p = t->buf + off;
    memcpy(p, fixed, fixed_len);
    if (var_len)
        memcpy(p + fixed_len, var, var_len);
    ((rs_record_header *)(void *)p)->size = (uint16_t)size;
    c->used += (uint32_t)size;
    c->record_count++;
    return off;
}

void
tb_seal(tb_trace *t, uint32_t index)
{
    rs_chunk_header *c = tb_chunk_header(t, index);
    c->flags |= RS_CHUNK_SEALED;
    c->checksum_len = c->used;
    c->checksum = rs_chunk_checksum(tb_header(t)->version_minor, (unsigned char *)c + sizeof *c,
                                    c->used);
}

size_t
tb_finish(tb_trace *t, int closed)
{
    rs_file_header *h = tb_header(t);
    h->chunks_published = t->nchunks;
    if (closed)
        h->flags |= RS_HDR_CLOSED;
    else
        h->flags &= ~RS_HDR_CLOSED;
    if (h->version_minor >= RS_TRACE_MINOR_HEADER_CHECKSUM)
        h->header_checksum = rs_header_checksum(h);
    return RS_HEADER_SIZE + (size_t)t->nchunks * t->chunk_size;
}

int
tb_write(const tb_trace *t, const char *path, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t n = len ? fwrite(t->buf, 1, len, f) : 0;
    int rc = fclose(f);
    return (n == len && rc == 0) ? 0 : -1;
}

char *
tb_tmpname(void)
{
    char *p = strdup("/tmp/rs-test-XXXXXX");
    int fd = p ? mkstemp(p) : -1;
    if (fd < 0) {
        fprintf(stderr, "trace_builder: mkstemp failed\n");
        abort();
    }
    close(fd);
    return p;
}
