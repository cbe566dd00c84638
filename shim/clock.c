/* clock.c: the records' time stamps, CLOCK_MONOTONIC in ns, read cheaply.
 *
 * Every record carries one time stamp, so the clock is on the hot path:
 * clock_gettime through the vDSO costs about 21 ns on the development VM,
 * a raw TSC read about 9 ns (docs/performance.md). Where the kernel itself
 * keeps CLOCK_MONOTONIC on the TSC (current clocksource "tsc": it checked
 * that the TSC is invariant and synchronised across CPUs) and the CPU says
 * the TSC is invariant (CPUID 0x80000007 EDX bit 8, Intel SDM vol. 3
 * 17.17.1 / AMD APM vol. 3 E.4.10), each thread extrapolates from its last
 * (clock_gettime, TSC) pair:
 *
 *     ns = base_ns + (tsc - base_tsc) * ns_per_tick
 *
 * ns_per_tick is measured over the process's life: from the first pair to
 * the newest, so its error shrinks as the process runs. A thread takes a
 * new pair (one clock_gettime) once its extrapolation spans more than
 * RS_CLOCK_REBASE_NS, so the value never drifts from CLOCK_MONOTONIC by
 * more than the clock's rate error (NTP slews at most 500 ppm, adjtimex(2))
 * over that span: 0.5 us. Within a thread the values never go back (a new
 * pair that lands below the last value returned is clamped to it).
 * Elsewhere (other clocksources, other CPUs, RECOMPSHIM_CLOCK=gettime) it is
 * clock_gettime every time.
 */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "record.h"

#if RS_HAVE_TSC
#include <cpuid.h>
#endif

/* A thread re-reads clock_gettime after this much extrapolated time (ns). */
#define RS_CLOCK_REBASE_NS 1000000ull
/* The rate is trusted once the first pair is this old (ns); before, every
 * read is clock_gettime. */
#define RS_CLOCK_CALIBRATE_NS 2000000ull

static uint64_t
gettime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* 0 undecided, 1 TSC, -1 clock_gettime only (clock.h: rs_clock_mode). */
int rs_clock_mode;
/* The process's first (clock_gettime, TSC) pair: written once, before
 * rs_clock_mode says 1 (release), read after loading it (acquire). */
static uint64_t g_first_tsc, g_first_ns;

__thread rs_clock_tls t_clk __attribute__((tls_model("initial-exec"), visibility("hidden")));

#if RS_HAVE_TSC
/* 1 when the kernel's clocksource is the TSC and the CPU says it is
 * invariant. Reads one sysfs file: called once, from the constructor. */
static int
tsc_usable(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u)
        return 0;
    __get_cpuid(0x80000007u, &a, &b, &c, &d);
    if (!(d & (1u << 8)))
        return 0;
    /* open/read, not stdio: no allocation inside the job's constructors */
    int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource",
                  O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char src[32] = {0};
    ssize_t n = read(fd, src, sizeof src - 1);
    close(fd);
    return n == 4 && memcmp(src, "tsc\n", 4) == 0;
}
#endif

void
rs_clock_init(void)
{
    const char *env = getenv("RECOMPSHIM_CLOCK");
    int tsc = 0;
#if RS_HAVE_TSC
    if (!(env && strcmp(env, "gettime") == 0) && tsc_usable()) {
        g_first_ns = gettime_ns();
        g_first_tsc = __rdtsc();
        tsc = 1;
    }
#else
    (void)env;
#endif
    __atomic_store_n(&rs_clock_mode, tsc ? 1 : -1, __ATOMIC_RELEASE);
}

int
rs_clock_uses_tsc(void)
{
    return __atomic_load_n(&rs_clock_mode, __ATOMIC_ACQUIRE) == 1;
}

#if RS_HAVE_TSC
/* Take a new (clock_gettime, TSC) pair for this thread and refresh the
 * process-wide rate from the first pair to this one. Returns the time. */
uint64_t
rs_clock_rebase(void)
{
    uint64_t ns = gettime_ns(), tsc = __rdtsc();
    uint64_t span_ns = ns - g_first_ns, span_ticks = tsc - g_first_tsc;
    uint64_t mult = 0;
    if (span_ns >= RS_CLOCK_CALIBRATE_NS && span_ticks > 0 && span_ticks < (1ull << 63))
        mult = (uint64_t)(((unsigned __int128)span_ns << 32) / span_ticks);
    t_clk.mult = mult;
    t_clk.base_ns = ns < t_clk.last ? t_clk.last : ns;
    t_clk.base_tsc = tsc;
    t_clk.limit_ticks = mult ? (RS_CLOCK_REBASE_NS << 32) / mult : 0;
    t_clk.last = t_clk.base_ns;
    return t_clk.base_ns;
}
#endif

uint64_t
rs_clock_gettime_ns(void)
{
    return gettime_ns();
}

uint64_t
rs_now_ns(void)
{
    return rs_now_ns_inline();
}
