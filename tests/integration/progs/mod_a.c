/* mod_a: NVTX-using shared module A (range "mod_a.range", 1111 bytes). */
#include "mod_common.h"
MOD_BODY(mod_a_run, "mod_a.range", 1111)
