/* run_dump.h: run the built recomp-dump on a file and capture its output. */
#ifndef RECOMP_RUN_DUMP_H
#define RECOMP_RUN_DUMP_H

/* Run `tool trace`; store malloc'd stdout and stderr text in *out and *err
 * (either may be NULL to discard). Returns the exit status, or -1 when the
 * tool could not be run or died of a signal. */
int run_dump(const char *tool, const char *trace, char **out, char **err);

#endif
