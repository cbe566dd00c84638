/* test_corpus.c: replay the committed fuzz seed corpus (tests/fuzz/corpus)
 * through the fuzz target's function: no crash, and the valid seeds read. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned char *
read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(n ? (size_t)n : 1);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

Test(fuzz_corpus, replay_every_seed)
{
    DIR *d = opendir(CORPUS_DIR);
    cr_assert_not_null(d, "%s", CORPUS_DIR);
    int files = 0, valid = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", CORPUS_DIR, e->d_name);
        size_t len;
        unsigned char *buf = read_all(path, &len);
        LLVMFuzzerTestOneInput(buf, len);
        /* also every prefix length at 64-byte steps: truncations */
        for (size_t cut = 0; cut < len; cut += 64)
            LLVMFuzzerTestOneInput(buf, cut);
        rs_reader *r;
        char err[640];
        int ok = rs_reader_open_mem(buf, len, path, &r, err, sizeof err) == RS_READ_OK;
        if (ok) {
            valid++;
            rs_reader_close(r);
        }
        /* seeds named valid-* must be accepted, bad-* refused */
        if (!strncmp(e->d_name, "valid-", 6))
            cr_assert(ok, "%s: %s", path, err);
        if (!strncmp(e->d_name, "bad-", 4))
            cr_assert_not(ok, "%s was accepted", path);
        free(buf);
        files++;
    }
    closedir(d);
    cr_assert_geq(files, 5, "corpus has %d files", files);
    cr_assert_geq(valid, 2);
}
