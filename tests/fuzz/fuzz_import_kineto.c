/* fuzz_import_kineto.c: libFuzzer target over the Kineto/Chrome trace
 * importer (analyzer/read/import_kineto.c) and the analysis behind it.
 * Build and run: tests/fuzz/run-fuzz-import.sh kineto [SECONDS] */
#include "fuzz_import_common.h"

extern const am_importer am_kineto_importer;

int LLVMFuzzerTestOneInputKineto(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInputKineto(const uint8_t *data, size_t size)
{
    /* gzip inputs are recognised by content, plain JSON as .json */
    fuzz_import_run(&am_kineto_importer, ".json", data, size);
    return 0;
}

#ifdef FUZZ_TARGET
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return LLVMFuzzerTestOneInputKineto(data, size);
}
#endif
