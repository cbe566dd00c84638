/* ms_internal.h: shared between the files of libmegasim_cuda.so. */
#ifndef MS_INTERNAL_H
#define MS_INTERNAL_H

#define MS_EXPORT __attribute__((visibility("default")))

void ms_set_message(const char *fmt, const char *arg);

#endif
