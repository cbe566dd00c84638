/* pickle.c: restricted unpickler (see pickle.h). Protocols 0-5. */
#include "pickle.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_CHUNK (1u << 20)
#define MAX_DEPTH_STACK (1u << 26)

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    unsigned char data[];
} chunk;

struct pk_doc {
    chunk *chunks;
};

static void *
arena(pk_doc *d, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    chunk *c = d->chunks;
    if (!c || c->used + n > c->cap) {
        size_t cap = n > ARENA_CHUNK ? n : ARENA_CHUNK;
        c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->next = d->chunks;
        c->used = 0;
        c->cap = cap;
        d->chunks = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

void
pk_free(pk_doc *d)
{
    if (!d)
        return;
    for (chunk *c = d->chunks, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    free(d);
}

typedef struct ld {
    pk_doc *d;
    const unsigned char *b;
    size_t n, pos, op_off;
    char *err;
    size_t errlen;
    pk_val **stack;
    size_t sp, scap;
    size_t *marks;
    size_t nmarks, mcap;
    pk_val **memo;
    size_t mcap2;
    size_t memo_n;            /* entries stored (MEMOIZE's next index) */
} ld;

static int
fail(ld *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int
fail(ld *l, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    snprintf(l->err, l->errlen, "offset %zu: %s", l->op_off, buf);
    return -1;
}

static pk_val *
newval(ld *l, int type)
{
    pk_val *v = arena(l->d, sizeof *v);
    if (v) {
        memset(v, 0, sizeof *v);
        v->type = (uint8_t)type;
    }
    return v;
}

static int
push(ld *l, pk_val *v)
{
    if (!v)
        return fail(l, "out of memory");
    if (l->sp == l->scap) {
        if (l->scap >= MAX_DEPTH_STACK)
            return fail(l, "pickle stack deeper than %u entries", MAX_DEPTH_STACK);
        size_t nc = l->scap ? l->scap * 2 : 256;
        pk_val **s = realloc(l->stack, nc * sizeof *s);
        if (!s)
            return fail(l, "out of memory");
        l->stack = s;
        l->scap = nc;
    }
    l->stack[l->sp++] = v;
    return 0;
}

static pk_val *
pop(ld *l)
{
    if (!l->sp) {
        fail(l, "stack underflow");
        return NULL;
    }
    return l->stack[--l->sp];
}

static pk_val *
top(ld *l)
{
    if (!l->sp) {
        fail(l, "stack underflow");
        return NULL;
    }
    return l->stack[l->sp - 1];
}

static int
need(ld *l, size_t k)
{
    if (l->n - l->pos < k)
        return fail(l, "truncated: %zu bytes needed, %zu left", k, l->n - l->pos);
    return 0;
}

static uint64_t
le(const unsigned char *p, int k)
{
    uint64_t v = 0;
    for (int i = k - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static int
seq_add(ld *l, pk_val *s, pk_val *v)
{
    if (s->u.seq.n == s->u.seq.cap) {
        size_t nc = s->u.seq.cap ? s->u.seq.cap * 2 : 4;
        pk_val **a = arena(l->d, nc * sizeof *a);
        if (!a)
            return fail(l, "out of memory");
        if (s->u.seq.n)
            memcpy(a, s->u.seq.v, s->u.seq.n * sizeof *a);
        s->u.seq.v = a;
        s->u.seq.cap = nc;
    }
    s->u.seq.v[s->u.seq.n++] = v;
    return 0;
}

static int
pop_mark(ld *l, size_t *base)
{
    if (!l->nmarks)
        return fail(l, "no MARK on the stack");
    *base = l->marks[--l->nmarks];
    if (*base > l->sp)
        return fail(l, "MARK above the stack top");
    return 0;
}

/* A text line (protocol 0 argument) without its '\n'. */
static int
line(ld *l, const char **s, size_t *len)
{
    const unsigned char *p = memchr(l->b + l->pos, '\n', l->n - l->pos);
    if (!p)
        return fail(l, "truncated: text argument without end of line");
    *s = (const char *)l->b + l->pos;
    *len = (size_t)(p - (l->b + l->pos));
    l->pos = (size_t)(p - l->b) + 1;
    return 0;
}

static int
memo_put(ld *l, uint64_t idx, pk_val *v)
{
    if (idx > l->n)
        return fail(l, "memo index %" PRIu64 " is absurd for a %zu-byte file", idx, l->n);
    if (idx >= l->mcap2) {
        size_t nc = l->mcap2 ? l->mcap2 : 256;
        while (nc <= idx)
            nc *= 2;
        pk_val **m = realloc(l->memo, nc * sizeof *m);
        if (!m)
            return fail(l, "out of memory");
        memset(m + l->mcap2, 0, (nc - l->mcap2) * sizeof *m);
        l->memo = m;
        l->mcap2 = nc;
    }
    if (!l->memo[idx])
        l->memo_n++;
    l->memo[idx] = v;
    return 0;
}

static int
memo_get(ld *l, uint64_t idx)
{
    if (idx >= l->mcap2 || !l->memo[idx])
        return fail(l, "memo index %" PRIu64 " was never stored", idx);
    return push(l, l->memo[idx]);
}

static int
str_val(ld *l, int type, size_t len)
{
    if (len > l->n - l->pos)
        return fail(l, "string length %zu runs past the end of the file (%zu bytes left)", len,
                    l->n - l->pos);
    pk_val *v = newval(l, type);
    if (!v)
        return fail(l, "out of memory");
    v->u.str.s = (const char *)l->b + l->pos;
    v->u.str.n = len;
    l->pos += len;
    return push(l, v);
}

static int
int_val(ld *l, int64_t i, int big)
{
    pk_val *v = newval(l, PK_INT);
    if (!v)
        return fail(l, "out of memory");
    v->u.i = i;
    v->big = (uint8_t)big;
    return push(l, v);
}

/* Little-endian two's complement of k bytes. */
static int
long_val(ld *l, size_t k)
{
    if (k > l->n - l->pos)
        return fail(l, "integer length %zu runs past the end of the file", k);
    const unsigned char *p = l->b + l->pos;
    l->pos += k;
    if (k == 0)
        return int_val(l, 0, 0);
    if (k <= 8) {
        uint64_t v = le(p, (int)k);
        if (k < 8 && (p[k - 1] & 0x80))
            v |= ~(uint64_t)0 << (8 * k);
        return int_val(l, (int64_t)v, 0);
    }
    int neg = p[k - 1] & 0x80;
    return int_val(l, neg ? INT64_MIN : INT64_MAX, 1);
}

static const char *
refused(int op)
{
    switch (op) {
    case 'c': return "GLOBAL (a class or function lookup)";
    case 0x93: return "STACK_GLOBAL (a class or function lookup)";
    case 'R': return "REDUCE (a call)";
    case 'b': return "BUILD (object state)";
    case 'i': return "INST (an object)";
    case 'o': return "OBJ (an object)";
    case 0x81: return "NEWOBJ (an object)";
    case 0x92: return "NEWOBJ_EX (an object)";
    case 'P': return "PERSID (a persistent id)";
    case 'Q': return "BINPERSID (a persistent id)";
    case 0x82: case 0x83: case 0x84: return "EXT (an extension registry lookup)";
    case 0x97: return "NEXT_BUFFER (an out-of-band buffer)";
    case 0x98: return "READONLY_BUFFER (an out-of-band buffer)";
    }
    return NULL;
}

static int
step(ld *l, int *stop)
{
    l->op_off = l->pos;
    if (need(l, 1) < 0)
        return -1;
    int op = l->b[l->pos++];
    const char *why = refused(op);
    if (why)
        return fail(l, "refused opcode 0x%02x %s: only plain data is accepted from untrusted "
                       "files",
                    op, why);
    size_t base;
    pk_val *v, *s;
    const char *t = NULL;
    size_t tl = 0;
    switch (op) {
    case 0x80: /* PROTO */
        if (need(l, 1) < 0)
            return -1;
        if (l->b[l->pos] > 5)
            return fail(l, "unsupported pickle protocol %d", l->b[l->pos]);
        l->pos++;
        return 0;
    case 0x95: /* FRAME */
        if (need(l, 8) < 0)
            return -1;
        l->pos += 8;
        return 0;
    case '.':
        *stop = 1;
        return 0;
    case '(':
        if (l->nmarks == l->mcap) {
            size_t nc = l->mcap ? l->mcap * 2 : 64;
            size_t *m = realloc(l->marks, nc * sizeof *m);
            if (!m)
                return fail(l, "out of memory");
            l->marks = m;
            l->mcap = nc;
        }
        l->marks[l->nmarks++] = l->sp;
        return 0;
    case '0':
        return pop(l) ? 0 : -1;
    case '1':
        if (pop_mark(l, &base) < 0)
            return -1;
        l->sp = base;
        return 0;
    case '2':
        return (v = top(l)) ? push(l, v) : -1;
    case 'N':
        return push(l, newval(l, PK_NONE));
    case 0x88:
    case 0x89:
        if (!(v = newval(l, PK_BOOL)))
            return fail(l, "out of memory");
        v->u.i = op == 0x88;
        return push(l, v);
    case 'I':
    case 'L': {
        if (line(l, &t, &tl) < 0)
            return -1;
        char buf[32];
        if (tl && t[tl - 1] == 'L')
            tl--;
        if (!tl || tl >= sizeof buf)
            return fail(l, "bad text integer");
        memcpy(buf, t, tl);
        buf[tl] = 0;
        if (op == 'I' && (!strcmp(buf, "00") || !strcmp(buf, "01"))) {
            if (!(v = newval(l, PK_BOOL)))
                return fail(l, "out of memory");
            v->u.i = buf[1] == '1';
            return push(l, v);
        }
        char *end;
        long long x = strtoll(buf, &end, 10);
        if (*end)
            return fail(l, "bad text integer");
        return int_val(l, x, 0);
    }
    case 'J':
        if (need(l, 4) < 0)
            return -1;
        l->pos += 4;
        return int_val(l, (int32_t)(uint32_t)le(l->b + l->pos - 4, 4), 0);
    case 'K':
        if (need(l, 1) < 0)
            return -1;
        return int_val(l, l->b[l->pos++], 0);
    case 'M':
        if (need(l, 2) < 0)
            return -1;
        l->pos += 2;
        return int_val(l, (int64_t)le(l->b + l->pos - 2, 2), 0);
    case 0x8a:
        if (need(l, 1) < 0)
            return -1;
        return long_val(l, l->b[l->pos++]);
    case 0x8b:
        if (need(l, 4) < 0)
            return -1;
        l->pos += 4;
        return long_val(l, (size_t)le(l->b + l->pos - 4, 4));
    case 'F': {
        if (line(l, &t, &tl) < 0)
            return -1;
        char buf[64];
        if (!tl || tl >= sizeof buf)
            return fail(l, "bad text float");
        memcpy(buf, t, tl);
        buf[tl] = 0;
        if (!(v = newval(l, PK_FLOAT)))
            return fail(l, "out of memory");
        v->u.f = strtod(buf, NULL);
        return push(l, v);
    }
    case 'G': {
        if (need(l, 8) < 0)
            return -1;
        uint64_t bits = 0;
        for (int i = 0; i < 8; i++)
            bits = bits << 8 | l->b[l->pos + (size_t)i];
        l->pos += 8;
        if (!(v = newval(l, PK_FLOAT)))
            return fail(l, "out of memory");
        memcpy(&v->u.f, &bits, sizeof bits);
        return push(l, v);
    }
    case 'S':
    case 'V': {
        if (line(l, &t, &tl) < 0)
            return -1;
        if (op == 'S' && tl >= 2 && (t[0] == '\'' || t[0] == '"')) {
            t++;
            tl -= 2;
        }
        if (!(v = newval(l, PK_STR)))
            return fail(l, "out of memory");
        v->u.str.s = t; /* escapes kept as written */
        v->u.str.n = tl;
        return push(l, v);
    }
    case 'T':
    case 'X':
    case 'B':
        if (need(l, 4) < 0)
            return -1;
        l->pos += 4;
        return str_val(l, op == 'B' ? PK_BYTES : PK_STR, (size_t)le(l->b + l->pos - 4, 4));
    case 'U':
    case 0x8c:
    case 'C':
        if (need(l, 1) < 0)
            return -1;
        return str_val(l, op == 'C' ? PK_BYTES : PK_STR, l->b[l->pos++]);
    case 0x8d:
    case 0x8e:
    case 0x96: {
        if (need(l, 8) < 0)
            return -1;
        uint64_t len = le(l->b + l->pos, 8);
        l->pos += 8;
        if (len > l->n)
            return fail(l, "string length %" PRIu64 " is absurd for a %zu-byte file", len,
                        l->n);
        return str_val(l, op == 0x8d ? PK_STR : PK_BYTES, (size_t)len);
    }
    case ']':
        return push(l, newval(l, PK_LIST));
    case ')':
        return push(l, newval(l, PK_TUPLE));
    case '}':
        return push(l, newval(l, PK_DICT));
    case 0x8f: /* EMPTY_SET: a list */
        return push(l, newval(l, PK_LIST));
    case 'a':
        if (!(v = pop(l)) || !(s = top(l)))
            return -1;
        if (s->type != PK_LIST)
            return fail(l, "APPEND to a non-list");
        return seq_add(l, s, v);
    case 'e':
    case 0x90: /* ADDITEMS */
        if (pop_mark(l, &base) < 0)
            return -1;
        if (base == 0)
            return fail(l, "APPENDS without a list");
        s = l->stack[base - 1];
        if (s->type != PK_LIST)
            return fail(l, "APPENDS to a non-list");
        for (size_t i = base; i < l->sp; i++)
            if (seq_add(l, s, l->stack[i]) < 0)
                return -1;
        l->sp = base;
        return 0;
    case 'l':
    case 't':
    case 0x91: /* FROZENSET */
        if (pop_mark(l, &base) < 0)
            return -1;
        if (!(v = newval(l, op == 't' ? PK_TUPLE : PK_LIST)))
            return fail(l, "out of memory");
        for (size_t i = base; i < l->sp; i++)
            if (seq_add(l, v, l->stack[i]) < 0)
                return -1;
        l->sp = base;
        return push(l, v);
    case 0x85:
    case 0x86:
    case 0x87: {
        size_t k = (size_t)(op - 0x84);
        if (l->sp < k)
            return fail(l, "stack underflow");
        if (!(v = newval(l, PK_TUPLE)))
            return fail(l, "out of memory");
        for (size_t i = l->sp - k; i < l->sp; i++)
            if (seq_add(l, v, l->stack[i]) < 0)
                return -1;
        l->sp -= k;
        return push(l, v);
    }
    case 'd':
        if (pop_mark(l, &base) < 0)
            return -1;
        if ((l->sp - base) % 2)
            return fail(l, "DICT with an odd number of items");
        if (!(v = newval(l, PK_DICT)))
            return fail(l, "out of memory");
        for (size_t i = base; i < l->sp; i++)
            if (seq_add(l, v, l->stack[i]) < 0)
                return -1;
        l->sp = base;
        return push(l, v);
    case 's': {
        pk_val *val = pop(l), *key = val ? pop(l) : NULL;
        if (!key || !(s = top(l)))
            return -1;
        if (s->type != PK_DICT)
            return fail(l, "SETITEM on a non-dict");
        return seq_add(l, s, key) < 0 ? -1 : seq_add(l, s, val);
    }
    case 'u':
        if (pop_mark(l, &base) < 0)
            return -1;
        if (base == 0)
            return fail(l, "SETITEMS without a dict");
        s = l->stack[base - 1];
        if (s->type != PK_DICT)
            return fail(l, "SETITEMS on a non-dict");
        if ((l->sp - base) % 2)
            return fail(l, "SETITEMS with an odd number of items");
        for (size_t i = base; i < l->sp; i++)
            if (seq_add(l, s, l->stack[i]) < 0)
                return -1;
        l->sp = base;
        return 0;
    case 'p':
    case 'g': {
        if (line(l, &t, &tl) < 0)
            return -1;
        char buf[24];
        if (!tl || tl >= sizeof buf)
            return fail(l, "bad memo index");
        memcpy(buf, t, tl);
        buf[tl] = 0;
        char *end;
        unsigned long long idx = strtoull(buf, &end, 10);
        if (*end)
            return fail(l, "bad memo index");
        if (op == 'g')
            return memo_get(l, idx);
        return (v = top(l)) ? memo_put(l, idx, v) : -1;
    }
    case 'q':
    case 'h':
        if (need(l, 1) < 0)
            return -1;
        {
            uint64_t idx = l->b[l->pos++];
            if (op == 'h')
                return memo_get(l, idx);
            return (v = top(l)) ? memo_put(l, idx, v) : -1;
        }
    case 'r':
    case 'j':
        if (need(l, 4) < 0)
            return -1;
        {
            uint64_t idx = le(l->b + l->pos, 4);
            l->pos += 4;
            if (op == 'j')
                return memo_get(l, idx);
            return (v = top(l)) ? memo_put(l, idx, v) : -1;
        }
    case 0x94: /* MEMOIZE */ {
        if (!(v = top(l)))
            return -1;
        return memo_put(l, l->memo_n, v);
    }
    }
    return fail(l, "unknown opcode 0x%02x", op);
}

pk_doc *
pk_load(const unsigned char *buf, size_t n, pk_val **root, char *err, size_t errlen)
{
    ld l;
    memset(&l, 0, sizeof l);
    l.d = calloc(1, sizeof *l.d);
    l.b = buf;
    l.n = n;
    l.err = err;
    l.errlen = errlen;
    *root = NULL;
    if (!l.d) {
        snprintf(err, errlen, "offset 0: out of memory");
        return NULL;
    }
    int stop = 0, rc = 0;
    while (!stop && (rc = step(&l, &stop)) == 0)
        ;
    if (rc == 0 && l.nmarks)
        rc = fail(&l, "STOP with an open MARK");
    if (rc == 0 && l.sp != 1)
        rc = fail(&l, "STOP with %zu values on the stack (want 1)", l.sp);
    if (rc == 0)
        *root = l.stack[0];
    free(l.stack);
    free(l.marks);
    free(l.memo);
    if (rc < 0) {
        pk_free(l.d);
        return NULL;
    }
    return l.d;
}

/* ---- helpers ---- */

int
pk_streq(const pk_val *v, const char *s)
{
    size_t n = strlen(s);
    return v && v->type == PK_STR && v->u.str.n == n && memcmp(v->u.str.s, s, n) == 0;
}

pk_val *
pk_get(const pk_val *d, const char *key)
{
    if (!d || d->type != PK_DICT)
        return NULL;
    /* the key's length once, then length and first byte before memcmp:
     * pk_streq per entry re-measured the key (docs/performance.md) */
    size_t n = strlen(key);
    for (size_t i = 0; i + 1 < d->u.seq.n; i += 2) {
        const pk_val *k = d->u.seq.v[i];
        if (k && k->type == PK_STR && k->u.str.n == n && (n == 0 || k->u.str.s[0] == key[0]) &&
            memcmp(k->u.str.s, key, n) == 0)
            return d->u.seq.v[i + 1];
    }
    return NULL;
}

int
pk_int(const pk_val *v, int64_t *out)
{
    if (!v || (v->type != PK_INT && v->type != PK_BOOL))
        return 0;
    *out = v->u.i;
    return 1;
}

int
pk_num(const pk_val *v, double *out)
{
    if (v && v->type == PK_FLOAT) {
        *out = v->u.f;
        return 1;
    }
    int64_t i;
    if (pk_int(v, &i)) {
        *out = (double)i;
        return 1;
    }
    return 0;
}

size_t
pk_len(const pk_val *v)
{
    if (!v)
        return 0;
    if (v->type == PK_LIST || v->type == PK_TUPLE)
        return v->u.seq.n;
    if (v->type == PK_DICT)
        return v->u.seq.n / 2;
    return 0;
}

pk_val *
pk_at(const pk_val *v, size_t i)
{
    if (!v || (v->type != PK_LIST && v->type != PK_TUPLE) || i >= v->u.seq.n)
        return NULL;
    return v->u.seq.v[i];
}
