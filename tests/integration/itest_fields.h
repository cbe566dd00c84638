/* itest_fields.h: record matching by fields, for the part-2 tests.
 *
 * An expected record is "KIND key=value key=value ...": it matches a dump
 * record of that kind that has each of those key=value tokens exactly
 * (other fields of the record are not compared). The part-2 tests name
 * every field the format defines for a call and leave out only those the
 * format leaves open (e.g. the size of a VMM_RELEASE, which is "by
 * handle"). */
#ifndef ITEST_FIELDS_H
#define ITEST_FIELDS_H

#include "itest.h"

/* 1 when normalised record `got` matches expected `exp` (see above). */
int it_fields_match(const char *got, const char *exp);
/* Asserts that the records of `kinds` (it_select) match `expected` one by
 * one, in order, with the same count; prints both lists on mismatch. */
void it_expect_fields(const it_dump *d, const char *kinds, long tid, const char *const *expected,
                      const char *what);
/* Number of records of the dump matching `exp`. */
size_t it_count_fields(const it_dump *d, const char *exp);
/* Reads the trace's file header; asserts exactly one trace under dir. */
struct rs_file_header;
void it_read_header(const char *dir, struct rs_file_header *h);
/* Number of lines of text starting with prefix. */
size_t it_count_prefix(const char *text, const char *prefix);

#endif
