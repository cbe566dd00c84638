/* peak_journal.h: the live set at a peak, kept during the one sweep instead
 * of a second replay of the source (issue 19).
 *
 * The live set at event P (a peak) is: the entries live at the end of the
 * sweep that were allocated at or before P, plus the entries allocated at or
 * before P that left the live set after P. The journal keeps the latter:
 * when the peak moves to a later event it forgets them (they were gone before
 * the new peak). Each entry live at P leaves at most once and two of them
 * never share a key, so the journal holds at most the live set at P: memory
 * grows with the live set, never with the number of events. Entries in it
 * keep receiving the attribution the timeline resolves later (pj_get). */
#ifndef RECOMP_ANALYZER_PEAK_JOURNAL_H
#define RECOMP_ANALYZER_PEAK_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "live.h"

typedef struct pj_key {
    uint64_t addr;
    uint8_t space;
} pj_key;

typedef struct peak_journal {
    live_set gone;            /* entries live at `mark` that left since */
    pj_key *keys;             /* their keys, to forget them in O(count) */
    size_t nkeys, capkeys;
    uint64_t mark;            /* event ordinal (seq) of the peak; 0 none yet */
} peak_journal;

void pj_init(peak_journal *j);
void pj_fini(peak_journal *j);
/* The peak is now the event with ordinal seq: forget what left before it. */
void pj_mark(peak_journal *j, uint64_t seq);
/* Entry e left the live set (freed or replaced) after the mark. Kept when
 * it was live at the mark (e->seq <= mark). 0, or -1 out of memory. */
int pj_removed(peak_journal *j, const live_ent *e);
/* The kept entry with this key, or NULL (for late attribution). */
live_ent *pj_get(peak_journal *j, uint8_t space, uint64_t addr);
/* The live set at the mark, given the live set now: a malloc'd array sorted
 * by seq in *out (count in *n). 0, or -1 out of memory. */
int pj_build(const peak_journal *j, const live_set *now, live_ent **out, size_t *n);

#endif
