/* test_config.c: RECOMPSHIM_* parsing (shim/config.c). */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

Test(config, sizes_with_suffixes)
{
    uint64_t v = 0;
    cr_assert_eq(rs_parse_size("0", &v), 0);
    cr_assert_eq(v, 0);
    cr_assert_eq(rs_parse_size("4096", &v), 0);
    cr_assert_eq(v, 4096);
    cr_assert_eq(rs_parse_size("64K", &v), 0);
    cr_assert_eq(v, 65536);
    cr_assert_eq(rs_parse_size("3M", &v), 0);
    cr_assert_eq(v, 3ull << 20);
    cr_assert_eq(rs_parse_size("2GiB", &v), 0);
    cr_assert_eq(v, 2ull << 30);
    cr_assert_eq(rs_parse_size("1t", &v), 0);
    cr_assert_eq(v, 1ull << 40);
    /* blanks around the value, as a shell quote leaves them */
    cr_assert_eq(rs_parse_size(" 1M ", &v), 0);
    cr_assert_eq(v, 1ull << 20);
}

Test(config, bad_sizes_rejected)
{
    uint64_t v = 7;
    cr_assert_eq(rs_parse_size("", &v), -1);
    cr_assert_eq(rs_parse_size("-1", &v), -1);
    cr_assert_eq(rs_parse_size("12Q", &v), -1);
    cr_assert_eq(rs_parse_size("1G1", &v), -1);
    cr_assert_eq(rs_parse_size("99999999999999999999", &v), -1);
    cr_assert_eq(rs_parse_size("20000000T", &v), -1); /* overflows 64 bits */
    cr_assert_eq(v, 7);
}

Test(config, windows)
{
    uint32_t k = 0;
    uint64_t a = 0, b = 0;
    cr_assert_eq(rs_parse_window("steps:3-5", &k, &a, &b), 0);
    cr_assert_eq(k, RS_WINDOW_STEPS);
    cr_assert_eq(a, 3);
    cr_assert_eq(b, 5);
    cr_assert_eq(rs_parse_window("time:1.5-2", &k, &a, &b), 0);
    cr_assert_eq(k, RS_WINDOW_TIME);
    cr_assert_eq(a, 1500000000ull);
    cr_assert_eq(b, 2000000000ull);
    cr_assert_eq(rs_parse_window("events:100-", &k, &a, &b), 0);
    cr_assert_eq(k, RS_WINDOW_EVENTS);
    cr_assert_eq(a, 100);
    cr_assert_eq(b, UINT64_MAX);
    cr_assert_eq(rs_parse_window("steps:5-3", &k, &a, &b), -1);
    cr_assert_eq(rs_parse_window("bogus:1-2", &k, &a, &b), -1);
    cr_assert_eq(rs_parse_window("steps", &k, &a, &b), -1);
    cr_assert_eq(rs_parse_window("steps:x-2", &k, &a, &b), -1);
}

Test(config, names_from_environment_are_sanitized)
{
    char out[16];
    rs_sanitize_name(out, sizeof out, "../etc/pass wd");
    cr_assert_str_eq(out, "_._etc_pass_wd");
    /* never a name that leaves the directory it is put in (#11) */
    static const char *const escapes[] = {"..", ".", "/", "../..", "./", ".hidden", "/etc"};
    for (size_t i = 0; i < sizeof escapes / sizeof *escapes; i++) {
        rs_sanitize_name(out, sizeof out, escapes[i]);
        cr_assert(out[0] != '.' && !strchr(out, '/') && out[0], "%s -> %s", escapes[i], out);
    }
    rs_sanitize_name(out, sizeof out, "..");
    cr_assert_str_eq(out, "_.");
    rs_sanitize_name(out, sizeof out, "run.1");
    cr_assert_str_eq(out, "run.1");
    rs_sanitize_name(out, sizeof out, "abcdefghijklmnopqrstuvwxyz");
    cr_assert_str_eq(out, "abcdefghijklmno");
}

Test(config, load_reads_env_and_exports_run_id)
{
    setenv("RECOMPSHIM_OUT", "/tmp/x", 1);
    setenv("RECOMPSHIM_MAX_BYTES", "1M", 1);
    setenv("RECOMPSHIM_WINDOW", "steps:1-2", 1);
    setenv("RECOMPSHIM_MEMINFO_MS", "250", 1);
    setenv("RECOMPSHIM_DISABLE", "yes", 1);
    unsetenv("RECOMPSHIM_RUN_ID");
    rs_config_load();
    cr_assert_str_eq(g_rs_cfg.out_dir, "/tmp/x");
    cr_assert_eq(g_rs_cfg.max_bytes, 1u << 20);
    cr_assert_eq(g_rs_cfg.window_kind, RS_WINDOW_STEPS);
    cr_assert_eq(g_rs_cfg.meminfo_interval_ns, 250000000ull);
    cr_assert_eq(g_rs_cfg.disable, 1);
    cr_assert(g_rs_cfg.run_id[0]);
    cr_assert_str_eq(getenv("RECOMPSHIM_RUN_ID"), g_rs_cfg.run_id);
    /* a child inherits it */
    char keep[96];
    strcpy(keep, g_rs_cfg.run_id);
    rs_config_load();
    cr_assert_str_eq(g_rs_cfg.run_id, keep);
}

Test(config, invalid_values_fall_back_to_defaults)
{
    setenv("RECOMPSHIM_MAX_BYTES", "lots", 1);
    setenv("RECOMPSHIM_WINDOW", "sometimes", 1);
    setenv("RECOMPSHIM_MEMINFO_MS", "-5", 1);
    setenv("RECOMPSHIM_DISABLE", "maybe", 1);
    unsetenv("RECOMPSHIM_OUT");
    rs_config_load();
    cr_assert_eq(g_rs_cfg.max_bytes, 0);
    cr_assert_eq(g_rs_cfg.window_kind, RS_WINDOW_NONE);
    cr_assert_eq(g_rs_cfg.meminfo_interval_ns, 100000000ull);
    cr_assert_eq(g_rs_cfg.disable, 0);
    cr_assert_str_eq(g_rs_cfg.out_dir, "./recomp-traces");
}

/* hnew2 finding 13: RECOMPSHIM_CLOCK and RECOMPSHIM_COMPACT were read
 * outside the settings list, so a bad value was taken silently; now each is
 * said on stderr and means the default, and a set-but-empty boolean is its
 * default (RECOMPSHIM_PYSTACK="" turned Python frames off). */
Test(config, clock_and_compact_are_settings, .init = cr_redirect_stderr)
{
    setenv("RECOMPSHIM_CLOCK", "rdtsc", 1);
    setenv("RECOMPSHIM_COMPACT", "2", 1);
    setenv("RECOMPSHIM_PYSTACK", "", 1);
    unsetenv("RANK");
    rs_config_load();
    cr_assert_str_eq(g_rs_cfg.clock, "");
    cr_assert_eq(g_rs_cfg.compact, 1);
    cr_assert_eq(g_rs_cfg.pystack, 1);
    fflush(stderr);
    cr_assert_stderr_eq_str(
        "recompshim: RECOMPSHIM_CLOCK=\"rdtsc\" is not valid: the one choice is gettime; using "
        "the default \"\"\n"
        "recompshim: RECOMPSHIM_COMPACT=\"2\" is not valid; using the default \"1\"\n");
    setenv("RECOMPSHIM_CLOCK", "gettime", 1);
    setenv("RECOMPSHIM_COMPACT", "no", 1);
    rs_config_load();
    cr_assert_str_eq(g_rs_cfg.clock, "gettime");
    cr_assert_eq(g_rs_cfg.compact, 0);
}

/* hnew finding 4/5 (issue 14): the one size parser (recomp/bytesize.h)
 * refuses nan, inf, exponents and every overflow, never wraps or falls
 * back silently. */
Test(config, sizes_refuse_nan_inf_overflow)
{
    static const char *const bad[] = {"nan", "inf", "-inf", "1e3", "1e3GiB", "+1",
                                      "18446744073709551616", "99999999999TiB",
                                      "16777216T", "1.", ".5G", "5 G", "0x10"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        uint64_t v = 7;
        cr_assert_eq(rs_parse_size(bad[i], &v), -1, "'%s' accepted", bad[i]);
        cr_assert_eq(v, 7);
    }
    uint64_t v = 0;
    cr_assert_eq(rs_parse_size("18446744073709551615", &v), 0); /* 2^64-1 itself */
    cr_assert_eq(v, UINT64_MAX);
    cr_assert_eq(rs_parse_size("16777215T", &v), 0); /* the largest whole TiB */
    cr_assert_eq(v, 16777215ull << 40);
    cr_assert_eq(rs_parse_size("79.5G", &v), 0); /* a fraction of a unit, exactly */
    cr_assert_eq(v, 79ull * (1ull << 30) + (1ull << 29));
    cr_assert_eq(rs_parse_size("80gib", &v), 0);
    cr_assert_eq(v, 80ull << 30);
}

/* hnew finding 5: RECOMPSHIM_WINDOW bounds that overflow 64 bits (seconds
 * x 1e9 ns, or an event index) are refused, not recorded as 0..0. */
Test(config, window_overflow_refused)
{
    uint32_t k = 0;
    uint64_t a = 1, b = 1;
    const char *why = NULL;
    cr_assert_eq(rs_parse_window_why("time:0-20000000000", &k, &a, &b, &why), -1);
    cr_assert(why && strstr(why, "overflow"), "%s", why ? why : "(null)");
    cr_assert_eq(rs_parse_window_why("events:0-99999999999999999999", &k, &a, &b, &why), -1);
    cr_assert(why && strstr(why, "overflow"), "%s", why ? why : "(null)");
    cr_assert_eq(rs_parse_window("time:18446744074-", &k, &a, &b), -1);
    cr_assert_eq(rs_parse_window("events:1.5-2", &k, &a, &b), -1);
    cr_assert_eq(rs_parse_window("steps:-1-2", &k, &a, &b), -1);
    cr_assert_eq(rs_parse_window("time:nan-1", &k, &a, &b), -1);
    cr_assert_eq(rs_parse_window("time:0-inf", &k, &a, &b), -1);
    cr_assert_eq(rs_parse_window("time:5-1", &k, &a, &b), -1);
    cr_assert_eq(a, 1);
    /* the largest bound that fits: 18446744073 s = 1.8e19 ns */
    cr_assert_eq(rs_parse_window("time:0-18446744073", &k, &a, &b), 0);
    cr_assert_eq(b, 18446744073000000000ull);
    cr_assert_eq(rs_parse_window("time:0-1000000", &k, &a, &b), 0);
    cr_assert_eq(b, 1000000000000000ull);
}

/* hnew findings 5 and 15 through the environment: a bad window records the
 * whole run (no window); a limit below the smallest trace (header + two
 * chunks) is raised to it. */
Test(config, env_window_and_max_bytes_clamped)
{
    setenv("RECOMPSHIM_WINDOW", "events:0-99999999999999999999", 1);
    setenv("RECOMPSHIM_MAX_BYTES", "1", 1);
    unsetenv("RECOMPSHIM_RUN_ID");
    rs_config_load();
    cr_assert_eq(g_rs_cfg.window_kind, RS_WINDOW_NONE);
    cr_assert_eq(g_rs_cfg.max_bytes, RS_HEADER_SIZE + 2ull * RS_CHUNK_SIZE);
    cr_assert_eq(g_rs_cfg.max_bytes, 528384ull);
    setenv("RECOMPSHIM_MAX_BYTES", "1M", 1);
    rs_config_load();
    cr_assert_eq(g_rs_cfg.max_bytes, 1ull << 20);
    setenv("RECOMPSHIM_MAX_BYTES", "nan", 1);
    rs_config_load();
    cr_assert_eq(g_rs_cfg.max_bytes, 0); /* the default: no limit */
    unsetenv("RECOMPSHIM_WINDOW");
    unsetenv("RECOMPSHIM_MAX_BYTES");
    unsetenv("RECOMPSHIM_RUN_ID");
}
