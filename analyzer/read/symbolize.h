/* symbolize.h: native stack frames to function, source file and line at
 * analysis time, from the module list a trace records (path, load bias,
 * build id), with elfutils' libdwfl (libdw): the module's own symbol tables
 * and DWARF, or a separate debug file found by build id or .gnu_debuglink
 * (libdwfl's standard search: beside the file, .debug/, /usr/lib/debug).
 * Where a frame cannot be named, the plain module+offset says why. */
#ifndef AM_SYMBOLIZE_H
#define AM_SYMBOLIZE_H

#include <stddef.h>
#include <stdint.h>

#include "trace_reader.h"

typedef struct am_symbolizer am_symbolizer;

/* A symbolizer for the modules of one process (one trace). NULL only when
 * out of memory. */
am_symbolizer *am_sym_new(void);
void am_sym_free(am_symbolizer *s);

/* Format the return address `addr` inside module `m` (both from the trace)
 * into buf (n bytes, always NUL-terminated):
 *   "MODULE+0xOFF in FUNC+0xN at FILE:LINE"   DWARF line information
 *   "MODULE+0xOFF in FUNC+0xN"                a symbol, no line information
 *   "MODULE+0xOFF (no symbol: REASON)"        e.g. the file is not on this
 *     machine, its build id differs from the recorded one (rebuilt since the
 *     run: naming would be wrong), it is stripped with no debug file found,
 *     or recomp-analyze was built without libdw.
 * MODULE is the file's base name, OFF = addr - load bias. Symbols and lines
 * are looked up at addr - 1 (the call instruction, not the one after it). */
void am_sym_format(am_symbolizer *s, const rs_module_info *m, uint64_t addr, char *buf,
                   size_t n);

#endif
