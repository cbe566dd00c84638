/* advisor_report.h: the advisor's part of the reports (advisor_report.c). */
#ifndef RECOMP_ANALYZER_ADVISOR_REPORT_H
#define RECOMP_ANALYZER_ADVISOR_REPORT_H

#include <stdio.h>

struct adv_verdict;

/* The verdict block; its last two lines are "verdict: CODE" and "change: ...". */
void adv_report_text(FILE *f, const struct adv_verdict *v);
/* The "verdict" object on a yajl_gen (passed as void *). */
void adv_report_json(void *yajl_gen, const struct adv_verdict *v);

#endif
