/* advisor_ran.c: whether the job ran out of memory, and the margin it really
 * had on the device (issue 14 B): a triage code is the verdict only with an
 * OOM or a negative margin; a job that ran says so, with its margin. */
#include "advisor.h"

int
adv_job_oomed(const am_job *j)
{
    for (size_t i = 0; i < j->nranks; i++)
        if (j->ranks[i].oom)
            return 1;
    return 0;
}

int
adv_device_spare(const adv_verdict *v, uint64_t *spare)
{
    int at = -1;
    for (size_t i = 0; i < v->nranks; i++) {
        uint64_t used = v->outside[i] + v->reserved[i];
        if (!v->capacity[i])
            return -1;
        if (used > v->capacity[i])
            return -1;
        if (at < 0 || v->capacity[i] - used < *spare) {
            *spare = v->capacity[i] - used;
            at = (int)i;
        }
    }
    return at;
}
