/* advisor_generic.c: no Megatron flags in the advice for a job that is not
 * Megatron (docs/advisor.md invariant 5).
 *
 * The triage rules name their levers as Megatron flags (the distributed
 * optimizer, precision-aware moments, the fused cross-entropy, ...). For a
 * plain PyTorch job those flags do not exist: every finding's evidence, its
 * lever and each of its levers' changes are rewritten here, in one place
 * after triage, so that no rule's lever path can escape the filter. Known
 * phrases become what they mean for any PyTorch job; a flag left over (a
 * rule added later) is rewritten as the words of its name, never printed as
 * a flag.
 */
#include <ctype.h>
#include <string.h>

#include "advisor.h"

/* Megatron phrase -> its meaning for any PyTorch job; longest first, so a
 * phrase is replaced before a flag it contains. */
static const char *const generic[][2] = {
    {"the distributed optimizer over a larger domain (--use-distributed-optimizer, more DP)",
     "a sharded optimizer (ZeRO/FSDP) over more data-parallel ranks"},
    {"lower-precision states (--use-precision-aware-optimizer --exp-avg-dtype bf16 "
     "--exp-avg-sq-dtype bf16)",
     "lower-precision states (bf16 optimizer moments)"},
    {"--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16",
     "bf16 optimizer moments"},
    {"(--use-distributed-optimizer, more DP)",
     "(a sharded optimizer, ZeRO/FSDP, over more data-parallel ranks)"},
    {"--use-distributed-optimizer, more DP",
     "a sharded optimizer (ZeRO/FSDP) over more data-parallel ranks"},
    {"--use-distributed-optimizer", "a sharded optimizer (ZeRO/FSDP)"},
    {"--optimizer-offload-fraction", "the optimizer's CPU offload share"},
    {"--cross-entropy-loss-fusion", "a fused cross-entropy loss"},
    {"--tensor-model-parallel-size", "tensor parallelism"},
    {"--ckpt-format torch_dist", "a distributed (sharded) checkpoint format"},
    {"--train-iters", "the run's iteration count"},
};

/* recomp-analyze's own options, which the advice may name for any job */
static const char *const own[] = {"--budget", "--headroom", "--salvage", "--ranks",
                                  "--iteration"};

/* Replace each `from` in s (capacity cap bytes) with `to`; what does not
 * fit is cut at cap - 1. */
static void
replace_all(char *s, size_t cap, const char *from, const char *to)
{
    size_t fl = strlen(from), tl = strlen(to);
    char *p = s;
    while ((p = strstr(p, from)) != NULL) {
        size_t len = strlen(s), at = (size_t)(p - s);
        size_t rest = len - at - fl;
        size_t room = cap - 1 - at; /* bytes available from p on */
        size_t put = tl < room ? tl : room;
        size_t keep = rest < room - put ? rest : room - put;
        memmove(p + put, p + fl, keep);
        memcpy(p, to, put);
        p[put + keep] = 0;
        p += put;
    }
}

static int
is_own(const char *p, size_t n)
{
    for (size_t i = 0; i < sizeof own / sizeof *own; i++)
        if (strlen(own[i]) == n && strncmp(p, own[i], n) == 0)
            return 1;
    return 0;
}

/* A flag left over ("--moe-aux-loss-coeff"): its name's words ("moe aux
 * loss coeff"), in place. Returns the number rewritten. */
static int
unflag(char *s)
{
    int n = 0;
    for (char *p = s; (p = strstr(p, "--")) != NULL;) {
        size_t k = 2;
        while (islower((unsigned char)p[k]) || isdigit((unsigned char)p[k]) || p[k] == '-')
            k++;
        if (k == 2 || !islower((unsigned char)p[2]) || is_own(p, k)) {
            p += k;
            continue;
        }
        memmove(p, p + 2, strlen(p + 2) + 1);
        for (size_t i = 0; i + 2 < k; i++)
            if (p[i] == '-')
                p[i] = ' ';
        p += k - 2;
        n++;
    }
    return n;
}

static void
make_generic(char *s, size_t cap)
{
    for (size_t i = 0; i < sizeof generic / sizeof *generic; i++)
        replace_all(s, cap, generic[i][0], generic[i][1]);
    unflag(s);
}

/* For a job that is not Megatron (v->cfg.megatron 0): the findings from
 * index `from` on name no Megatron flag in their evidence, lever or levers
 * (invariant 5). A no-op for a Megatron job. */
void
adv_findings_generic(adv_verdict *v, size_t from)
{
    if (v->cfg.megatron)
        return;
    for (size_t i = from; i < v->nfindings; i++) {
        adv_finding *f = &v->findings[i];
        make_generic(f->evidence, sizeof f->evidence);
        make_generic(f->lever, sizeof f->lever);
        for (size_t k = 0; k < f->nlevers; k++)
            make_generic(f->levers[k].change, sizeof f->levers[k].change);
    }
}
