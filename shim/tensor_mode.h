/* tensor_mode.h: RECOMPSHIM_TENSORS, applied before the job starts. */
#ifndef RECOMPSHIM_TENSOR_MODE_H
#define RECOMPSHIM_TENSOR_MODE_H

#include <stdint.h>

#include "record.h"

/* Constructor time: read RECOMPSHIM_TENSORS and, when allowed, rewrite
 * the allocator's configuration in the environment (PyTorch reads it once,
 * at its first CUDA allocation). async: add backend:cudaMallocAsync to
 * whichever of PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF is set (both
 * when neither), keeping the other options; nocache: set
 * PYTORCH_NO_CUDA_MEMORY_CACHING=1. Refusals (docs/architecture.md, Modes) leave the
 * environment untouched and print one stderr line. */
RS_HIDDEN void rs_tensor_mode_apply(void);

/* enum rs_mode that took effect, RS_REFUSE_* bits, and a note for the
 * trace (refusal reason or the configuration written), "" when none. */
RS_HIDDEN uint32_t rs_tensor_mode(void);
RS_HIDDEN uint32_t rs_tensor_refusals(void);
RS_HIDDEN const char *rs_tensor_note(void);

/* Pure helpers, for unit tests. */
/* 1 when the comma-separated key:value list `conf` sets `key` to `value`
 * (value compared case-insensitively). */
RS_HIDDEN int rs_alloc_conf_has(const char *conf, const char *key, const char *value);
/* The refusal bits for `mode` ("async"/"nocache") given the two config
 * variables (NULL when unset) and the NUL-separated command line. */
RS_HIDDEN uint32_t rs_tensor_refusals_for(const char *mode, const char *alloc_conf,
                                          const char *cuda_alloc_conf, const char *cmdline,
                                          size_t cmdline_len);

#endif
