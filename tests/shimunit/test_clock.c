/* test_clock.c: the records' clock (shim/clock.c) against CLOCK_MONOTONIC.
 *
 * GIVEN the shim's clock (calibrated TSC where the kernel's clocksource is
 * the TSC, clock_gettime elsewhere or with RECOMPSHIM_CLOCK=gettime), WHEN
 * it is read many times over tens of milliseconds (across its calibration
 * and its per-thread re-basing), THEN every value lies between
 * clock_gettime read just before and just after (within the documented
 * extrapolation error) and no thread ever sees it go back. No assertion on
 * how fast it is. */
#include <criterion/criterion.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"

/* Extrapolation error allowed (ns): the rate's error over one re-basing
 * span (1 ms) is far below this; a wrong rate or unit is far above. */
#define TOL_NS 20000ull

static uint64_t
mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Reads the clock for at least `ms` milliseconds and at least `min_reads`
 * reads, with pauses (so re-basing and calibration happen); returns the
 * number of reads checked. Both bounds, not a count within a time: a
 * loaded machine makes fewer reads per millisecond, and the test must not
 * turn into a speed assertion (it failed that way under a load of 30 on
 * 2 cores). */
static long
check_for(unsigned ms, long min_reads)
{
    uint64_t end = mono() + (uint64_t)ms * 1000000ull, last = 0;
    long n = 0;
    while (mono() < end || n < min_reads) {
        for (int i = 0; i < 2000; i++, n++) {
            uint64_t before = mono(), v = rs_now_ns(), after = mono();
            cr_assert_geq(v + TOL_NS, before, "clock %llu behind CLOCK_MONOTONIC %llu",
                          (unsigned long long)v, (unsigned long long)before);
            cr_assert_leq(v, after + TOL_NS, "clock %llu ahead of CLOCK_MONOTONIC %llu",
                          (unsigned long long)v, (unsigned long long)after);
            cr_assert_geq(v, last, "clock went back in one thread: %llu after %llu",
                          (unsigned long long)v, (unsigned long long)last);
            last = v;
        }
        struct timespec pause = {0, 300000 + (n % 7) * 100000}; /* 0.3-0.9 ms */
        nanosleep(&pause, NULL);
    }
    return n;
}

static void *
thread_check(void *arg)
{
    (void)arg;
    check_for(40, 2000);
    return NULL;
}

Test(clock, follows_monotonic_and_never_goes_back)
{
    unsetenv("RECOMPSHIM_CLOCK");
    rs_clock_init();
    check_for(60, 10000);
}

Test(clock, threads_each_follow_monotonic)
{
    unsetenv("RECOMPSHIM_CLOCK");
    rs_clock_init();
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, thread_check, NULL);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
}

Test(clock, gettime_when_asked)
{
    setenv("RECOMPSHIM_CLOCK", "gettime", 1);
    rs_clock_init();
    cr_assert_eq(rs_clock_uses_tsc(), 0);
    check_for(5, 1000);
}

/* The TSC is used only where the kernel itself keeps time on it. */
Test(clock, tsc_only_when_the_kernel_clocksource_is_tsc)
{
    unsetenv("RECOMPSHIM_CLOCK");
    rs_clock_init();
    char src[32] = "";
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
    if (f) {
        if (!fgets(src, sizeof src, f))
            src[0] = '\0';
        fclose(f);
    }
    if (strcmp(src, "tsc\n") != 0)
        cr_assert_eq(rs_clock_uses_tsc(), 0, "clocksource %s but the TSC is used", src);
#if defined(__x86_64__)
    /* and where both hold, the fast path is the one taken (the tests above
     * then exercise it) */
    unsigned a, b, c, d;
    int invariant = __get_cpuid(0x80000000u, &a, &b, &c, &d) && a >= 0x80000007u &&
                    __get_cpuid(0x80000007u, &a, &b, &c, &d) && (d & (1u << 8));
    if (strcmp(src, "tsc\n") == 0 && invariant)
        cr_assert_eq(rs_clock_uses_tsc(), 1, "clocksource tsc, invariant TSC, but clock_gettime");
#endif
}
