/* json_str.h: the one JSON string writer of every JSON output of the
 * analyzer (--json, --perfetto, compare --json, the verdict's part). */
#ifndef AM_JSON_STR_H
#define AM_JSON_STR_H

#include <stddef.h>
#include <string.h>
#include <yajl/yajl_gen.h>

/* Bytes s[0..n) (text from a trace: any bytes) as one JSON string on g:
 * valid UTF-8 (RFC 3629: no overlong forms, surrogates or code points
 * above U+10FFFF) is kept as it is; each byte of an invalid sequence
 * becomes U+FFFD, as Python's errors="replace" does, so every reader's
 * JSON parser accepts the document; control characters, quotes and
 * backslashes are escaped by yajl. Any length (heap beyond 4 KiB).
 * Returns yajl's status (yajl_gen_status_ok). */
yajl_gen_status am_json_str(yajl_gen g, const char *s, size_t n);

/* am_json_str of a NUL-terminated string. */
#define AM_JSON_S(g, s) am_json_str((g), (s), strlen(s))

#endif
