/* pyframes.h: Python frames to Megatron ranges (catalog.def CAT_PYFRAME,
 * CAT_PYGAP; docs/python-frames.md "Megatron-Core from Python frames").
 *
 * A native trace of format 1.3 gives each allocation the Python stack it was
 * made in, but no event when a frame is entered or left. A source turns the
 * stacks into ranges: each allocation's (and tensor free's) stack is mapped
 * once to the catalog rows of its Megatron frames (am_pyframes_map), and
 * before the event the allocating thread's synthetic ranges are brought to
 * that list (am_pysyn_sync): RANGE_PUSH/RANGE_POP events in the domain
 * "python", which the timeline and the advisor read like Megatron's own
 * ranges. Ranges therefore open at the first allocation or tensor free made
 * inside a frame and close at the first one made outside it; a frame that
 * allocates and frees nothing leaves no range, and two calls of one frame
 * with nothing in between read as one.
 */
#ifndef RECOMP_ANALYZER_PYFRAMES_H
#define RECOMP_ANALYZER_PYFRAMES_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

#define AM_PYF_MAX 16                     /* mapped frames kept per stack */
#define AM_PYF_DOMAIN_ID 0xfffffff0u      /* domain_id of the synthetic ranges */
#define AM_PYF_DOMAIN "python"

/* The catalog rows (CAT_PYFRAME) of a Python stack's Megatron frames.
 * names/lens: the frames' qualified names, OUTERMOST first, n of them.
 * Writes at most cap row indices (outermost first) to rows; returns how many
 * (deeper matches past cap are dropped). Pure function of its inputs. */
size_t am_pyframes_map(const char *const *names, const uint32_t *lens, size_t n, uint16_t *rows,
                       size_t cap);

/* The range name of CAT_PYFRAME row `row` (static storage). */
const char *am_pyframes_range(uint16_t row);

typedef struct am_pysyn am_pysyn;

/* A synthesizer with no thread state; NULL out of memory. */
am_pysyn *am_pysyn_new(void);
void am_pysyn_free(am_pysyn *s);
/* Forget every thread (a source's rewind). */
void am_pysyn_reset(am_pysyn *s);

/* Note one of the trace's own RANGE_PUSH / RANGE_POP events (any domain):
 * a Megatron range open on the thread is not made again from frames.
 * Returns 0, -1 out of memory. */
int am_pysyn_note(am_pysyn *s, const am_event *ev);

/* Bring thread ev->tid's synthetic ranges to the frames `rows` (n of them,
 * from am_pyframes_map; n = 0: no Megatron frame, e.g. C++ autograd) just
 * before event ev: writes the pops and pushes, in order, stamped with ev's
 * time and thread, to out (at most cap; 2 * AM_PYF_MAX + 2 always suffice)
 * and returns how many; -1 out of memory. Names point to static storage.
 * grow_only (a tensor free): only pushes, else nothing -- the frees a
 * function's locals make as its frame is torn down come after its return
 * and belong to it, as they do to the Megatron range around its call. */
int am_pysyn_sync(am_pysyn *s, const am_event *ev, const uint16_t *rows, size_t n, int grow_only,
                  am_event *out, size_t cap);

#endif
