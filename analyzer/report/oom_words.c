/* oom_words.c: an OOM's place and live bytes in words, from what the OOM
 * record itself says (issue 14 E). An OOM recorded after RECOMPSHIM_MAX_BYTES
 * stopped recording (the shim's reserved tail: am_oom.past_limit) carries its
 * time, request and cudaMemGetInfo sample, but not the iteration, the phase
 * or the live set: those the sweep holds are of the last recorded event, so
 * no sentence states them as the OOM's. */
#include <stdio.h>

#include "report.h"

/* Where the OOM happened: "iteration 1, forward", "before iteration 0,
 * init" (model construction, checkpoint loading); past the byte limit
 * "iteration and phase unknown (recorded after the byte limit)". Returns buf. */
const char *
am_oom_when(const am_oom *o, char *buf, size_t n)
{
    if (o->past_limit)
        snprintf(buf, n, "iteration and phase unknown (recorded after the byte limit)");
    else if (o->iteration < 0)
        snprintf(buf, n, "before iteration 0, %s", am_phase_name(o->phase));
    else
        snprintf(buf, n, "iteration %d, %s", o->iteration, am_phase_name(o->phase));
    return buf;
}

/* What was live at the OOM: "live device 93.37 GiB, tensor 62.77 GiB" (the
 * tensor level only where the rank has it); past the byte limit the live
 * set was not recorded: the device's use from the record's cudaMemGetInfo
 * sample (total - free, bytes; PyTorch's and everything else's) when one was
 * taken, and the last recorded figures as lower bounds. Returns buf. */
const char *
am_oom_live(const am_rank *r, const am_oom *o, char *buf, size_t n)
{
    char a[32], b[32], c[32];
    int tensor = (r->levels & AM_LVL_TENSOR) != 0;
    if (!o->past_limit) {
        snprintf(buf, n, "live device %s%s%s", am_fmt_bytes(o->live[AM_L_DEVICE], a, sizeof a),
                 tensor ? ", tensor " : "",
                 tensor ? am_fmt_bytes(o->live[AM_L_TENSOR], b, sizeof b) : "");
        return buf;
    }
    int off = 0;
    if (o->total_bytes && o->total_bytes >= o->free_bytes)
        off = snprintf(buf, n, "device in use %s of %s (cudaMemGetInfo at the OOM); ",
                       am_fmt_bytes(o->total_bytes - o->free_bytes, a, sizeof a),
                       am_fmt_bytes(o->total_bytes, b, sizeof b));
    if (off < 0 || (size_t)off >= n)
        return buf;
    snprintf(buf + off, n - (size_t)off, "live set not recorded (at the last recorded event: "
             "device %s%s%s, lower bounds)", am_fmt_bytes(o->live[AM_L_DEVICE], c, sizeof c),
             tensor ? ", tensor " : "",
             tensor ? am_fmt_bytes(o->live[AM_L_TENSOR], b, sizeof b) : "");
    return buf;
}
