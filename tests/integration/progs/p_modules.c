/* p_modules: NVTX from two dlopen'ed modules (argv[1], argv[2]) and from
 * the executable: cudaMalloc(100); push "main.range" (depth 1);
 * A: push "mod_a.range" (depth 2), cudaMalloc(1111), mark, free, pop (1);
 * B: push "mod_b.range" (depth 2), cudaMalloc(2222), mark, free, pop (1);
 * pop (0); cudaFree(100 block). */
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>

#include "prog_util.h"

static int
run_module(const char *path, const char *fn)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("FAIL: dlopen %s: %s\n", path, dlerror());
        return 3;
    }
    int (*f)(void) = (int (*)(void))dlsym(h, fn);
    if (!f || f() != 0) {
        printf("FAIL: %s in %s\n", fn, path);
        return 3;
    }
    return 0;
}

int
main(int argc, char **argv)
{
    void *p;
    if (argc != 3) {
        printf("FAIL: usage: p_modules MOD_A MOD_B\n");
        return 3;
    }
    OK(cudaMalloc(&p, 100));
    nvtxRangePushA("main.range");
    if (run_module(argv[1], "mod_a_run") || run_module(argv[2], "mod_b_run"))
        return 3;
    nvtxRangePop();
    OK(cudaFree(p));
    printf("done\n");
    return 0;
}
