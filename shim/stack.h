/* stack.h: native stacks for OOM records. */
#ifndef RECOMPSHIM_STACK_H
#define RECOMPSHIM_STACK_H

#include <stdint.h>

#include "record.h"

/* Constructor time: load libunwind (libunwind.so.8, RTLD_LOCAL so its
 * _Unwind_* and backtrace symbols never interpose the job's), else warm up
 * glibc's backtrace so no loader work happens later inside a hook. */
RS_HIDDEN void rs_stack_init(void);

/* Up to `max` return addresses of the calling thread, innermost first,
 * after skipping `skip` frames. Returns the count (0 when no unwinder).
 * May take the loader's lock (libunwind's dl_iterate_phdr): OOM path only. */
RS_HIDDEN int rs_capture_stack(uint64_t *frames, int max, int skip);

/* "libunwind", "glibc" or "none": which unwinder rs_capture_stack uses. */
RS_HIDDEN const char *rs_stack_unwinder(void);

#endif
