/* The live set (analyzer/model/live.c) against a plain array model: random
 * inserts, replacements and deletions over few keys (replacements, backward
 * shifts) and many (rehashes). #19: live_put_old finds the key or
 * its empty slot in one probe; every answer must stay what the model says. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "live.h"

typedef struct { uint64_t addr, size, seq; uint8_t space, on; } model_ent;

static model_ent *
model_find(model_ent *m, size_t n, uint8_t space, uint64_t addr)
{
    for (size_t i = 0; i < n; i++)
        if (m[i].on && m[i].addr == addr && m[i].space == space)
            return &m[i];
    return NULL;
}

static void
run_ops(unsigned seed, int nkeys, int ops)
{
    live_set l;
    live_init(&l);
    model_ent *m = calloc((size_t)ops, sizeof *m);
    cr_assert(m);
    size_t nm = 0;
    uint64_t bytes = 0, count = 0, seq = 0;
    srand(seed);
    for (int op = 0; op < ops; op++) {
        uint8_t space = (uint8_t)(rand() % 2);
        uint64_t addr = 0x7f0000000000ull + (uint64_t)(rand() % nkeys) * 512;
        model_ent *me = model_find(m, nm, space, addr);
        if (rand() % 3) {
            live_ent e = {.addr = addr, .size = 1 + (uint64_t)(rand() % 4096), .seq = ++seq,
                          .space = space};
            live_ent old;
            int put = live_put_old(&l, &e, &old);
            cr_assert_eq(put, me ? 1 : 0, "op %d: put says %d", op, put);
            if (me) {
                cr_assert(old.seq == me->seq && old.size == me->size, "op %d: replaced", op);
                bytes -= me->size;
                me->size = e.size;
                me->seq = e.seq;
            } else {
                m[nm++] = (model_ent){addr, e.size, e.seq, space, 1};
                count++;
            }
            bytes += e.size;
        } else {
            live_ent out;
            int del = live_del(&l, space, addr, &out);
            cr_assert_eq(del, me ? 1 : 0, "op %d: del says %d", op, del);
            if (me) {
                cr_assert_eq(out.seq, me->seq, "op %d: deleted", op);
                bytes -= me->size;
                count--;
                me->on = 0;
            }
        }
        cr_assert_eq(l.count, count, "op %d", op);
        cr_assert_eq(l.bytes, bytes, "op %d", op);
    }
    size_t seen = 0;
    LIVE_FOREACH(&l, e) {
        model_ent *me = model_find(m, nm, e->space, e->addr);
        cr_assert(me && me->seq == e->seq && me->size == e->size, "stray entry");
        seen++;
    }
    cr_assert_eq(seen, count);
    for (size_t i = 0; i < nm; i++)
        if (m[i].on) {
            live_ent *e = live_get(&l, m[i].space, m[i].addr);
            cr_assert(e && e->seq == m[i].seq, "lost key %zu", i);
        }
    free(m);
    live_fini(&l);
}

Test(live_set, few_keys)
{
    for (unsigned seed = 1; seed <= 20; seed++)
        run_ops(seed, 40, 4000);
}

Test(live_set, many_keys_rehash)
{
    for (unsigned seed = 1; seed <= 3; seed++)
        run_ops(seed, 6000, 30000);
}
