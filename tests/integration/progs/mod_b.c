/* mod_b: NVTX-using shared module B (range "mod_b.range", 2222 bytes). */
#include "mod_common.h"
MOD_BODY(mod_b_run, "mod_b.range", 2222)
