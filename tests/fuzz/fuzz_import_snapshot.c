/* fuzz_import_snapshot.c: libFuzzer target over the restricted unpickler
 * (analyzer/read/pickle.c) and the PyTorch snapshot importer behind it.
 * Build and run: tests/fuzz/run-fuzz-import.sh snapshot [SECONDS] */
#include "fuzz_import_common.h"
#include "pickle.h"

extern const am_importer am_snapshot_importer;

int LLVMFuzzerTestOneInputSnapshot(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInputSnapshot(const uint8_t *data, size_t size)
{
    pk_val *root;
    char err[512];
    pk_doc *d = pk_load(data, size, &root, err, sizeof err);
    if (d) {
        (void)pk_get(root, "segments");
        pk_free(d);
    } else if (strncmp(err, "offset ", 7) != 0) {
        abort(); /* every unpickler error names the byte offset */
    }
    fuzz_import_run(&am_snapshot_importer, ".pickle", data, size);
    return 0;
}

#ifdef FUZZ_TARGET
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return LLVMFuzzerTestOneInputSnapshot(data, size);
}
#endif
