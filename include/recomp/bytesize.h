/* bytesize.h: the one parser of byte sizes and decimal quantities for every
 * size flag and setting of the project (recomp-analyze --budget/--headroom
 * and its gates, the shim's RECOMPSHIM_MAX_BYTES, RECOMPSHIM_WINDOW's
 * bounds). Header-only so the shim (no libc beyond the basics, hidden
 * symbols) and the analyzer share it without a common library.
 *
 * Grammar: DIGITS[.DIGITS] then, for sizes, an optional unit K, M, G or T
 * (any case, powers of 1024), an optional 'i' and an optional 'B':
 * 80GiB, 79.1G, 64k, 4096, 2TB. Trailing blanks are ignored. Refused, with
 * the reason: no digits (nan, inf, abc), a sign (-5GiB, +1), an exponent
 * (1e3), an unknown unit, anything after it, and a value above 2^64-1
 * bytes: never a silent wrap, clamp or fallback (issue 14: unknown is not
 * zero, and a value the user did not mean is not used). Exact integer
 * arithmetic: a fraction of a unit is rounded down to whole bytes. */
#ifndef RECOMP_BYTESIZE_H
#define RECOMP_BYTESIZE_H

#include <stddef.h>
#include <stdint.h>

__extension__ typedef unsigned __int128 rs_u128; /* exact products of 64-bit values */

/* s's leading DIGITS[.DIGITS] times mult into *out, *end after them.
 * allow_frac 0 refuses a fraction. Returns NULL on success, else why not
 * (a phrase for "'VALUE' is not a size: <why>"). */
static inline const char *
rs_decimal_scaled(const char *s, uint64_t mult, int allow_frac, const char **end, uint64_t *out)
{
    const char *p = s;
    rs_u128 v = 0, frac = 0, den = 1;
    if (*p == '-' || *p == '+')
        return "a signed value (sizes and bounds are unsigned)";
    if (*p < '0' || *p > '9')
        return "not a number";
    for (; *p >= '0' && *p <= '9'; p++) {
        v = v * 10 + (unsigned)(*p - '0');
        if (v > UINT64_MAX)
            return "more than 2^64-1 (16 EiB): overflows";
    }
    if (*p == '.') {
        if (!allow_frac)
            return "a fraction where a whole number is wanted";
        p++;
        if (*p < '0' || *p > '9')
            return "no digits after the decimal point";
        for (; *p >= '0' && *p <= '9'; p++)
            if (den < (rs_u128)1000000000000000000ull) { /* 18 digits suffice */
                frac = frac * 10 + (unsigned)(*p - '0');
                den *= 10;
            }
    }
    rs_u128 r = v * mult + frac * mult / den;
    if (r > UINT64_MAX)
        return "more than 2^64-1 (16 EiB): overflows";
    *out = (uint64_t)r;
    *end = p;
    return NULL;
}

/* A byte size (grammar above) into *out (bytes). Returns NULL on success,
 * else why the text is not a size. Zero is a valid result: callers for
 * which 0 means nothing (a device budget) refuse it themselves. */
static inline const char *
rs_bytes_parse(const char *s, uint64_t *out)
{
    const char *p = s ? s : "";
    while (*p == ' ' || *p == '\t')
        p++;
    const char *q = p;
    uint64_t mult = 1;
    /* the unit first: the number is scaled by it exactly */
    while ((*q >= '0' && *q <= '9') || *q == '.')
        q++;
    switch (*q) {
    case 'k': case 'K': mult = 1ull << 10; break;
    case 'm': case 'M': mult = 1ull << 20; break;
    case 'g': case 'G': mult = 1ull << 30; break;
    case 't': case 'T': mult = 1ull << 40; break;
    default: break;
    }
    const char *end;
    uint64_t v;
    const char *why = rs_decimal_scaled(p, mult, 1, &end, &v);
    if (why)
        return why;
    if (end != q)
        return "not a number";
    if (mult > 1) {
        end++;
        if (*end == 'i' || *end == 'I')
            end++;
    }
    if (*end == 'b' || *end == 'B')
        end++;
    while (*end == ' ' || *end == '\t')
        end++;
    if (*end)
        return "unknown unit or trailing text (units: K, M, G, T, KiB ... TiB, powers of 1024)";
    *out = v;
    return NULL;
}

#endif
