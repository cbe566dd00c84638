/* clock.h: the records' clock (clock.c). rs_now_ns itself is in record.h. */
#ifndef RECOMPSHIM_CLOCK_H
#define RECOMPSHIM_CLOCK_H

#include "record.h"

/* Choose the clock once, at load: the calibrated TSC where the kernel's
 * clocksource is the TSC and the CPU says it is invariant, and
 * RECOMPSHIM_CLOCK is not "gettime"; clock_gettime(CLOCK_MONOTONIC)
 * otherwise. Until it runs, rs_now_ns is clock_gettime. */
RS_HIDDEN void rs_clock_init(void);
/* 1 when rs_now_ns extrapolates from the TSC (for the log and tests). */
RS_HIDDEN int rs_clock_uses_tsc(void);

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define RS_HAVE_TSC 1
#else
#define RS_HAVE_TSC 0
#endif

/* A thread's extrapolation (clock.c): CLOCK_MONOTONIC ns = base_ns +
 * ((tsc - base_tsc) * mult >> 32) while tsc - base_tsc < limit_ticks. */
typedef struct rs_clock_tls {
    uint64_t base_tsc, base_ns, limit_ticks, last, mult;
} rs_clock_tls;
extern __thread rs_clock_tls t_clk __attribute__((tls_model("initial-exec"), visibility("hidden")));
/* 0 undecided, 1 TSC, -1 clock_gettime only. */
extern int rs_clock_mode RS_HIDDEN;
/* A new (clock_gettime, TSC) pair for this thread; returns its time. */
RS_HIDDEN uint64_t rs_clock_rebase(void);
/* clock_gettime(CLOCK_MONOTONIC) in ns. */
RS_HIDDEN uint64_t rs_clock_gettime_ns(void);

/* rs_now_ns inline, for the record paths (one per record): a TSC read, a
 * multiply and three compares when the TSC is in use and this thread's
 * extrapolation is fresh; rs_clock_rebase or clock_gettime otherwise. The
 * same value rs_now_ns returns (it calls this). */
static inline __attribute__((always_inline)) uint64_t
rs_now_ns_inline(void)
{
#if RS_HAVE_TSC
    if (__builtin_expect(__atomic_load_n(&rs_clock_mode, __ATOMIC_ACQUIRE) == 1, 1)) {
        uint64_t d = __rdtsc() - t_clk.base_tsc;
        if (__builtin_expect(d >= t_clk.limit_ticks, 0))
            return rs_clock_rebase();
        uint64_t ns = t_clk.base_ns + (uint64_t)(((unsigned __int128)d * t_clk.mult) >> 32);
        if (ns < t_clk.last)
            ns = t_clk.last;
        t_clk.last = ns;
        return ns;
    }
#endif
    return rs_clock_gettime_ns();
}

#endif
