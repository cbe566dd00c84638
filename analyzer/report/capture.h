/* capture.h: what the timeline reporters (--perfetto, --html) need of a
 * rank, taken during the analysis' first pass through am_observer: each
 * level's counter, downsampled with the peak kept, NVTX ranges per thread
 * as slices, collectives and thread names (capture.c). */
#ifndef RECOMP_ANALYZER_CAPTURE_H
#define RECOMP_ANALYZER_CAPTURE_H

#include <stddef.h>
#include <stdint.h>

#include "analysis.h"

/* Counter buckets kept per level and rank. A bucket holds the highest value
 * in its time span (with its time) and the last one, so a level's series
 * has at most 2 * AM_CAPTURE_BUCKETS points and always holds the peak. When
 * a trace needs more buckets, their width doubles and neighbours merge. */
#define AM_CAPTURE_BUCKETS 2048
/* Slices (NVTX ranges) and collectives kept per rank: the first ones in
 * time order; the rest are counted in dropped_slices. */
#define AM_CAPTURE_MAX_SLICES 50000

typedef struct am_cbucket {
    uint64_t max_t, max_v, last_t, last_v;
} am_cbucket;

typedef struct am_cseries {
    am_cbucket *b;
    size_t n;
    uint64_t width_ns;        /* bucket span: 1 << k ns */
    uint64_t nsamples;        /* counter changes seen */
} am_cseries;

typedef struct am_cslice {
    uint64_t start_ns, end_ns;
    uint32_t tid;
    uint32_t name;            /* index into names */
    uint8_t kind;             /* 0 range, 1 collective (instant, size in bytes) */
    uint64_t bytes;
} am_cslice;

typedef struct am_cthread {
    uint32_t tid;
    char name[32];
    /* open ranges: start time and name index (push/pop stack) */
    struct { uint64_t t; uint32_t name; } *open;
    size_t nopen, capopen;
} am_cthread;

typedef struct am_capture {
    const char *path;         /* the source's path (matches am_rank.path) */
    am_cseries level[AM_NLEVELS];
    am_cslice *slices;
    size_t nslices, capslices;
    uint64_t dropped_slices;
    am_cthread *threads;
    size_t nthreads, capthreads;
    char **names;             /* interned range names */
    size_t nnames, capnames;
    uint64_t last_t;
    int oom;                  /* out of memory while capturing: partial */
} am_capture;

/* An observer that fills c (zeroed by the caller; path set). */
void am_capture_observer(am_capture *c, am_observer *o);

/* Close ranges still open at the end (trace cut or killed). */
void am_capture_finish(am_capture *c);

void am_capture_free(am_capture *c);

/* The capture of rank r among caps[0..n), or NULL. */
const am_capture *am_capture_of(const am_capture *caps, size_t n, const am_rank *r);

#endif
