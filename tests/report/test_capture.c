/* capture.c's downsampling (capture.h): a series far longer than the cap
 * keeps at most 2 * AM_CAPTURE_BUCKETS points, its exact peak (value and
 * time), time order, and its last value. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "capture.h"

static void
feed(am_capture *c, am_observer *o, uint64_t n, uint64_t peak_at, uint64_t peak)
{
    uint64_t x = 88172645463325252ull; /* xorshift: a noisy series below the peak */
    for (uint64_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint64_t v = i == peak_at ? peak : x % (peak - 1);
        o->counter(o->ctx, AM_L_TENSOR, i * 997, v);
    }
    (void)c;
}

static void
check_series(const am_cseries *s, uint64_t peak, uint64_t peak_t)
{
    cr_assert_leq(s->n, AM_CAPTURE_BUCKETS);
    uint64_t best = 0, best_t = 0, prev_t = 0;
    for (size_t i = 0; i < s->n; i++) {
        cr_expect_geq(s->b[i].max_t, prev_t);
        cr_expect_geq(s->b[i].last_t, s->b[i].max_t);
        prev_t = s->b[i].last_t;
        if (s->b[i].max_v > best)
            best = s->b[i].max_v, best_t = s->b[i].max_t;
    }
    cr_expect_eq(best, peak);
    cr_expect_eq(best_t, peak_t);
}

Test(capture, peak_kept_at_any_position_under_the_cap)
{
    const uint64_t n = 300000, peak = (uint64_t)80 << 30;
    const uint64_t at[] = {0, 1, 4095, 4096, 150000, n - 2, n - 1};
    for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
        am_capture c = {0};
        am_observer o;
        am_capture_observer(&c, &o);
        feed(&c, &o, n, at[k], peak);
        check_series(&c.level[AM_L_TENSOR], peak, at[k] * 997);
        cr_expect_eq(c.level[AM_L_TENSOR].nsamples, n);
        am_capture_free(&c);
    }
}

Test(capture, short_series_kept_whole)
{
    am_capture c = {0};
    am_observer o;
    am_capture_observer(&c, &o);
    for (uint64_t i = 0; i < 100; i++)
        o.counter(o.ctx, AM_L_DEVICE, i * 5000, i);
    const am_cseries *s = &c.level[AM_L_DEVICE];
    cr_expect_eq(s->n, 100);
    cr_expect_eq(s->b[99].last_v, 99);
    am_capture_free(&c);
}
