/* Context parallelism's communication buffers (analyzer/attribute/cp_comm.c):
 * inside Megatron's core attention, the tensors Transformer Engine allocates
 * right before a CP exchange are boundary cp_comm, not core_attn, for each
 * --cp-comm-type in TE's allocation order (docs/megasim.md "Context
 * parallelism"): p2p (ring: send and receive buffer per step), a2a (Ulysses:
 * a contiguous copy and the receive buffer per tensor, posted as a group of
 * per-peer sends and receives, as all_to_all_single does), all_gather (the
 * gathered output, cp x what each rank sends). Hand-made traces, every tensor
 * live at the end, so the tensor peak holds them all. Sizes stand for
 * Llama-3 8B at s 8192, CP=2 (kv 8 MiB, q and O 32 MiB), in KiB. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "abuild.h"

#define TL "megatron.core.transformer.transformer_layer.TransformerLayer."
#define ATT "megatron.core.transformer.attention.forward."
#define K 1024ull
#define KV (8 * K)
#define Q (32 * K)

typedef struct cp_trace {
    ab *a;
    uint64_t t, ptr, total;
} cp_trace;

static void
tensor(cp_trace *c, uint64_t size)
{
    c->total += size;
    ab_tensor(c->a, AB_MAIN, c->t++, c->ptr, (int64_t)size, c->total, 1ull << 30);
    c->ptr += 1 << 20;
}

static void
coll(cp_trace *c, uint32_t op, uint64_t bytes)
{
    ab_coll(c->a, AB_MAIN, c->t++, op, bytes);
}

/* TE's fused attention call: its outputs (o, lse) just before its nvte range */
static void
fused_attn(cp_trace *c, uint64_t o, uint64_t lse)
{
    tensor(c, o);
    tensor(c, lse);
    ab_push(c->a, AB_MAIN, c->t++, "nvte_flash_attn_fwd");
    ab_pop(c->a, AB_MAIN, c->t++);
}

static void
begin(cp_trace *c)
{
    c->a = ab_new();
    c->t = 10;
    c->ptr = 0x10000000;
    c->total = 0;
    ab_thread(c->a, AB_MAIN, 1, "python");
    ab_alloc(c->a, AB_MAIN, 2, 0x10000000, 1ull << 30);    /* the segments */
    ab_push(c->a, AB_MAIN, c->t++, TL "_forward_attention.self_attention");
    tensor(c, Q + 2 * KV);                                  /* qkv: attention_other */
    ab_push(c->a, AB_MAIN, c->t++, ATT "core_attention");
}

/* end the layer, analyse, and check the two contributors of layer 1 */
static void
finish(cp_trace *c, uint64_t cp_bytes, uint64_t core_bytes)
{
    ab_pop(c->a, AB_MAIN, c->t++);
    ab_pop(c->a, AB_MAIN, c->t++);
    char *dir = ab_tmpdir(), f[512];
    snprintf(f, sizeof f, "%s/r0.rstrace", dir);
    ab_write(c->a, f, 1);
    char *out = NULL, *err = NULL;
    int rc = ab_run(AB_ARGS("--json", f), &out, &err);
    cr_assert_eq(rc, 0, "recomp-analyze: %s", err);
    yajl_val j = ab_json(out);
    cr_assert(j, "JSON");
    const char *pk = "ranks[0].peak";
    cr_expect_eq(ab_int(j, "ranks[0].peak.bytes"), (long long)c->total);
    char p[128];
    int k = ab_contrib(j, pk, "forward", "cp_comm", 1);
    if (cp_bytes) {
        cr_assert(k >= 0, "no cp_comm contributor");
        snprintf(p, sizeof p, "%s.contributors[%d].bytes", pk, k);
        cr_expect_eq(ab_int(j, p), (long long)cp_bytes, "cp_comm bytes");
    } else {
        cr_expect(k < 0, "a cp_comm contributor without CP");
    }
    k = ab_contrib(j, pk, "forward", "core_attn", 1);
    cr_assert(k >= 0, "no core_attn contributor");
    snprintf(p, sizeof p, "%s.contributors[%d].bytes", pk, k);
    cr_expect_eq(ab_int(j, p), (long long)core_bytes, "core_attn bytes");
    yajl_tree_free(j);
    free(out);
    free(err);
    unlink(f);
    rmdir(dir);
}

/* Ring attention, CP=3 on this rank's view: torch.cat((k, v)) and the first
 * receive buffer before step 0's exchange; after step 0's attention (its
 * half-chunk output is 2 kv bytes too: the size alone would take it) the
 * next receive buffer; then the LSE clone and the corrected output. */
Test(cp_comm, p2p_ring_buffers)
{
    cp_trace c;
    begin(&c);
    tensor(&c, 2 * KV);                                      /* torch.cat((k, v)) */
    tensor(&c, 2 * KV);                                      /* the next KV chunk */
    coll(&c, RS_COLL_SEND, 2 * KV);
    coll(&c, RS_COLL_RECV, 2 * KV);
    fused_attn(&c, Q / 2, K);                                /* a step's output: 2 kv */
    tensor(&c, 2 * KV);                                      /* the next KV chunk */
    coll(&c, RS_COLL_SEND, 2 * KV);
    coll(&c, RS_COLL_RECV, 2 * KV);
    fused_attn(&c, Q, K);
    tensor(&c, K);                                           /* LSE clone */
    tensor(&c, Q);                                           /* corrected output */
    finish(&c, 3 * 2 * KV, Q / 2 + K + Q + K + K + Q);
}

/* Ulysses: per tensor a contiguous copy and the all-to-all output, posted as
 * one send and one receive per peer (2 peers, half each) in an NCCL group;
 * the reordered result (index_select) the attention reads stays core_attn,
 * and so does a same-sized tensor allocated before an earlier exchange. */
Test(cp_comm, a2a_ulysses_buffers)
{
    cp_trace c;
    begin(&c);
    static const uint64_t sizes[] = {Q, KV, KV};
    for (int i = 0; i < 3; i++) {
        tensor(&c, sizes[i]);                                /* x.contiguous() */
        tensor(&c, sizes[i]);                                /* torch.empty_like(x) */
        coll(&c, RS_COLL_GROUP_START, 0);
        for (int peer = 0; peer < 2; peer++) {
            coll(&c, RS_COLL_SEND, sizes[i] / 2);
            coll(&c, RS_COLL_RECV, sizes[i] / 2);
        }
        coll(&c, RS_COLL_GROUP_END, 0);
        tensor(&c, sizes[i]);                                /* the reordered q, k, v */
    }
    fused_attn(&c, Q, K);
    tensor(&c, Q);                                           /* the output's exchange */
    tensor(&c, Q);
    coll(&c, RS_COLL_GROUP_START, 0);
    coll(&c, RS_COLL_SEND, Q / 2);
    coll(&c, RS_COLL_RECV, Q / 2);
    coll(&c, RS_COLL_SEND, Q / 2);
    coll(&c, RS_COLL_RECV, Q / 2);
    coll(&c, RS_COLL_GROUP_END, 0);
    tensor(&c, Q);                                           /* the returned output */
    finish(&c, 2 * (Q + KV + KV) + 2 * Q, (Q + KV + KV) + Q + K + Q);
}

/* All-gather: k and v gathered over CP=2 (the output is 2 x what each rank
 * sends), each reordered into a second copy; then the output and two
 * half-chunk steps. */
Test(cp_comm, all_gather_buffers)
{
    cp_trace c;
    begin(&c);
    for (int i = 0; i < 2; i++) {
        tensor(&c, 2 * KV);                                  /* gathered */
        coll(&c, RS_COLL_ALL_GATHER, KV);
        tensor(&c, 2 * KV);                                  /* index_select copy */
    }
    tensor(&c, Q);                                           /* torch.empty_like(q) */
    fused_attn(&c, Q / 2, K / 2);
    fused_attn(&c, Q / 2, K / 2);
    finish(&c, 2 * 2 * KV, 2 * 2 * KV + Q + Q + K);
}

/* No CP: a collective elsewhere (a tensor-parallel all-gather in the MLP) and
 * core attention's own tensors of the same size stay what they are. */
Test(cp_comm, no_collective_in_core_attention)
{
    cp_trace c;
    begin(&c);
    fused_attn(&c, Q, K);
    tensor(&c, 2 * KV);
    ab_pop(c.a, AB_MAIN, c.t++);                             /* core_attention */
    coll(&c, RS_COLL_SEND, 2 * KV);
    ab_push(c.a, AB_MAIN, c.t++, ATT "core_attention");
    finish(&c, 0, Q + K + 2 * KV);
}
