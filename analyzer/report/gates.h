/* gates.h: --fail-on regression gates (docs/analysis.md "Gates"). */
#ifndef RECOMP_ANALYZER_GATES_H
#define RECOMP_ANALYZER_GATES_H

#include <stdint.h>
#include <stdio.h>

#include "compare.h"

enum { AM_G_OOM, AM_G_VERDICT, AM_G_PEAK, AM_G_RESERVED, AM_G_UNMATCHED };

typedef struct am_gate {
    int kind;                 /* AM_G_* */
    int negate;               /* verdict!=PATTERN */
    int relative;             /* peak=+...: against the control (compare only) */
    int percent;              /* value is a percentage */
    double value;             /* percent, or bytes */
    char pattern[96];         /* verdict: the code, * matching any text */
    char text[160];           /* the gate as written */
} am_gate;

typedef struct am_gates {
    am_gate *v;
    size_t n;
} am_gates;

/* "80GiB", "79.5G", "512MiB", "1024" (bytes; K/M/G/T are powers of 1024,
 * with or without "iB"/"B"). 0, or -1 when s is not a size. */
int am_parse_size(const char *s, uint64_t *out);

/* Append the comma-separated gates of spec (commas inside [] belong to a
 * verdict code) to *g. 0, or -1 with the offending item in err. */
int am_gates_parse(const char *spec, am_gates *g, char *err, size_t n);

/* Gates that cannot apply: relative thresholds and "unmatched" without
 * compare, "verdict" without the advisor. 0, or -1 with err. */
int am_gates_check(const am_gates *g, int compare, int advice, char *err, size_t n);

/* Evaluate every gate on the subjects (a single run, or the candidates
 * against control; control NULL for a single analysis) and print one
 * summary line on f: "recomp-analyze: gates: PASS|FAIL ...". A gate that
 * cannot be decided fails and says why: a level n/a, or a peak threshold
 * whose answer an OOM hides (the cut run's peak is only a lower bound: a
 * candidate under the threshold, or a rise over a cut control). Returns the
 * number of gates failed. */
int am_gates_eval(const am_gates *g, const am_runsum *control, const am_runsum *subj,
                  size_t n, FILE *f);

void am_gates_free(am_gates *g);

#endif
