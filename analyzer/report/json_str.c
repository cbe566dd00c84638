/* json_str.c: valid UTF-8 JSON strings from any bytes (json_str.h). */
#include <stdint.h>
#include <stdlib.h>

#include "json_str.h"

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 when the
 * byte at s starts none (RFC 3629, section 4's table). */
static size_t
utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range */
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0; /* no overlong forms */
        if (c == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F; /* not above U+10FFFF */
    } else
        return 0;
    if (len > n || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return len;
}

yajl_gen_status
am_json_str(yajl_gen g, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, k;
    while (i < n && (k = utf8_len(u + i, n - i)) != 0)
        i += k;
    if (i == n) /* the common case: valid as it is */
        return yajl_gen_string(g, u, n);
    unsigned char stack[4096], *buf = stack;
    size_t cap = 3 * n; /* every byte at most one U+FFFD (3 bytes) */
    if (cap > sizeof stack && !(buf = malloc(cap)))
        return yajl_gen_string(g, (const unsigned char *)"", 0); /* out of memory: empty */
    size_t o = 0;
    for (i = 0; i < n;) {
        k = utf8_len(u + i, n - i);
        if (k) {
            for (size_t j = 0; j < k; j++)
                buf[o++] = u[i + j];
            i += k;
        } else {
            buf[o++] = 0xEF, buf[o++] = 0xBF, buf[o++] = 0xBD; /* U+FFFD */
            i++;
        }
    }
    yajl_gen_status st = yajl_gen_string(g, buf, o);
    if (buf != stack)
        free(buf);
    return st;
}
