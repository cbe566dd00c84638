/* pickle.h: a restricted unpickler for untrusted files (PyTorch memory
 * snapshots). Plain data only: None, bool, int, float, str, bytes, list,
 * tuple, dict, set/frozenset (as lists), the memo, marks and frames.
 * Anything that names or calls code (GLOBAL, STACK_GLOBAL, REDUCE, BUILD,
 * INST, OBJ, NEWOBJ, NEWOBJ_EX, PERSID, BINPERSID, EXT*, buffers) and any
 * unknown opcode is refused with an error naming the byte offset.
 *
 * Values live in one arena owned by the pk_doc; nothing is freed until
 * pk_free(). Memory is proportional to the file.
 */
#ifndef RECOMP_ANALYZER_PICKLE_H
#define RECOMP_ANALYZER_PICKLE_H

#include <stddef.h>
#include <stdint.h>

typedef enum pk_type {
    PK_NONE = 0, PK_BOOL, PK_INT, PK_FLOAT, PK_STR, PK_BYTES, PK_LIST, PK_TUPLE, PK_DICT
} pk_type;

typedef struct pk_val pk_val;
struct pk_val {
    uint8_t type;             /* pk_type */
    uint8_t big;              /* PK_INT: did not fit in int64 (value clamped) */
    union {
        int64_t i;            /* BOOL, INT */
        double f;             /* FLOAT */
        struct { const char *s; size_t n; } str;   /* STR, BYTES (not NUL-terminated) */
        struct { pk_val **v; size_t n, cap; } seq;  /* LIST, TUPLE; DICT: k0,v0,k1,v1... */
    } u;
};

typedef struct pk_doc pk_doc;

/* Unpickle buf[0..n). Returns the document (root in *root) or NULL with
 * "offset N: what" in err. buf must stay valid until pk_free (strings
 * point into it). */
pk_doc *pk_load(const unsigned char *buf, size_t n, pk_val **root, char *err, size_t errlen);
void pk_free(pk_doc *d);

/* Helpers. dict lookup by a str key (NULL when absent or not a dict). */
pk_val *pk_get(const pk_val *dict, const char *key);
/* 1 when v is a str equal to s. */
int pk_streq(const pk_val *v, const char *s);
/* Integer value (INT/BOOL) into *out: 1 ok, 0 not an integer. */
int pk_int(const pk_val *v, int64_t *out);
/* Number (INT/FLOAT) as double: 1 ok. */
int pk_num(const pk_val *v, double *out);
/* Length of a list/tuple (0 otherwise); dict: number of pairs. */
size_t pk_len(const pk_val *v);
pk_val *pk_at(const pk_val *v, size_t i);

#endif
