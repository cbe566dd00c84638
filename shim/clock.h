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

#endif
