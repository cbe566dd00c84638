/* resolve.c: lazy, per-hook resolution of the real functions (apis.def). */
#include "resolve.h"

#include <dlfcn.h>
#include <link.h>
#include <stdatomic.h>
#include <string.h>

#include "writer.h"

enum { RS_API_COUNT = 0
#define RS_API(name, code, lib) + 1
#include "recomp/apis.def"
#undef RS_API
};

struct api_entry {
    const char *name;
    int lib;
};

static const struct api_entry k_apis[] = {
#define RS_API(name, code, lib) [code] = {#name, lib},
#include "recomp/apis.def"
#undef RS_API
};
#define RS_API_MAX ((int)(sizeof k_apis / sizeof *k_apis) - 1)
_Static_assert(sizeof k_apis / sizeof *k_apis == RS_API_COUNT + 1, "API codes are dense from 1");

enum { UNRESOLVED = 0, RESOLVED = 1, MISSING = 2 };
void *rs_real_table[sizeof k_apis / sizeof *k_apis];
static atomic_int g_state[sizeof k_apis / sizeof *k_apis];

const char *
rs_hook_name(int code)
{
    return (code > 0 && code <= RS_API_MAX && k_apis[code].name) ? k_apis[code].name : "?";
}

struct find_lib {
    const char *needle;
    char path[4096];
};

static int
find_lib_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct find_lib *f = arg;
    if (info->dlpi_name && strstr(info->dlpi_name, f->needle)) {
        strncpy(f->path, info->dlpi_name, sizeof f->path - 1);
        return 1;
    }
    return 0;
}

void *
rs_resolve_sym(const char *name, int lib)
{
    void *p = dlsym(RTLD_NEXT, name);
    if (p)
        return p;
    const char *needle = lib == RS_LIB_CUDART ? "libcudart.so"
                         : lib == RS_LIB_CUDA ? "libcuda.so"
                         : lib == RS_LIB_NCCL ? "libnccl.so"
                         : lib == RS_LIB_C10  ? "libc10.so"
                                              : NULL;
    if (!needle)
        return NULL;
    struct find_lib f = {.needle = needle};
    if (dl_iterate_phdr(find_lib_cb, &f) == 1) {
        void *h = dlopen(f.path, RTLD_NOLOAD | RTLD_LAZY);
        if (h) {
            p = dlsym(h, name);
            dlclose(h);
        }
    }
    return p;
}

void *
rs_real(int code)
{
    void *p = __atomic_load_n(&rs_real_table[code], __ATOMIC_ACQUIRE);
    if (__builtin_expect(p != NULL, 1))
        return p;
    if (atomic_load(&g_state[code]) == MISSING)
        return NULL;
    t_rs.guard++;
    p = rs_resolve_sym(k_apis[code].name, k_apis[code].lib);
    t_rs.guard--;
    if (p) {
        __atomic_store_n(&rs_real_table[code], p, __ATOMIC_RELEASE);
        atomic_store(&g_state[code], RESOLVED);
        return p;
    }
    int expect = UNRESOLVED;
    if (atomic_compare_exchange_strong(&g_state[code], &expect, MISSING)) {
        rs_log(0, "the real %s was not found; that hook is disabled", k_apis[code].name);
        if (rs_writer_state() == RS_W_OPEN)
            rs_record_meta(RS_META_HOOK_MISSING, k_apis[code].name, strlen(k_apis[code].name));
    }
    return NULL;
}

void
rs_resolve_report_missing(void)
{
    for (int i = 1; i <= RS_API_MAX; i++)
        if (atomic_load(&g_state[i]) == MISSING)
            rs_record_meta(RS_META_HOOK_MISSING, k_apis[i].name, strlen(k_apis[i].name));
}

int
rs_cuda_runtime_version(void)
{
    int (*fn)(int *) = (int (*)(int *))rs_resolve_sym("cudaRuntimeGetVersion", RS_LIB_CUDART);
    int v = 0;
    if (fn && fn(&v) != 0)
        v = 0;
    return v;
}

int
rs_query_device(void *_Atomic *cache, const char *getter, int lib)
{
    void *p = atomic_load(cache);
    if (!p) {
        p = rs_resolve_sym(getter, lib);
        atomic_store(cache, p);
    }
    int d = -1;
    if (!p || ((int (*)(int *))p)(&d) != 0 || d < 0 || d >= 128)
        return -1;
    return d;
}

void
rs_learn_device_slow(void *_Atomic *cache, const char *getter, int lib)
{
    if (t_rs.device >= 0)
        return;
    int d = rs_query_device(cache, getter, lib);
    if (d >= 0)
        t_rs.device = (int8_t)d;
}
