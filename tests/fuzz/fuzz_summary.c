/* fuzz_summary.c: libFuzzer target over the summary reader
 * (analyzer/report/summary.c, docs/summary-format.md). The checksum would
 * stop almost every mutation at the header, so the target seals each input
 * with a valid header first (flags 0: stored as it is, not deflated): the
 * fuzzer's bytes are the payload, and every field check behind the checksum
 * is reached. The seeds (corpus_summary/) are payloads of megasim jobs'
 * summaries, inflated.
 * Build and run: tests/fuzz/run-fuzz-summary.sh [SECONDS] */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "summary.h"

int LLVMFuzzerTestOneInputSummary(const uint8_t *data, size_t size);

static void
put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

int
LLVMFuzzerTestOneInputSummary(const uint8_t *data, size_t size)
{
    unsigned char *buf = malloc(AM_SUMMARY_HEADER + size);
    if (!buf)
        return 0;
    memset(buf, 0, AM_SUMMARY_HEADER);
    memcpy(buf, AM_SUMMARY_MAGIC, 8);
    put_le(buf + 8, AM_SUMMARY_MAJOR, 2);
    put_le(buf + 10, AM_SUMMARY_MINOR, 2);
    put_le(buf + 16, size, 8);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 1099511628211ull;
    put_le(buf + 24, h, 8);
    memcpy(buf + AM_SUMMARY_HEADER, data, size);
    am_summary s;
    char err[1024];
    if (am_summary_parse("fuzz.rssum", buf, AM_SUMMARY_HEADER + size, &s, err, sizeof err) == 0)
        am_summary_free(&s);
    free(buf);
    return 0;
}

#ifdef FUZZ_TARGET
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return LLVMFuzzerTestOneInputSummary(data, size);
}
#endif
