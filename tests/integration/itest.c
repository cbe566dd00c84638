/* itest.c: helpers for the LD_PRELOAD integration tests (see itest.h). */
#include "itest.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RUN_TIMEOUT_S 60

static void
sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

void
it_init(it_ctx *c)
{
    memset(c, 0, sizeof *c);
    const char *tmp = getenv("TMPDIR");
    snprintf(c->base, sizeof c->base, "%s/rs-itest-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    cr_assert(mkdtemp(c->base) != NULL, "mkdtemp: %s", strerror(errno));
    snprintf(c->out, sizeof c->out, "%s/out", c->base);
    snprintf(c->io, sizeof c->io, "%s/io", c->base);
    cr_assert(mkdir(c->out, 0700) == 0 && mkdir(c->io, 0700) == 0, "mkdir: %s", strerror(errno));
    cr_log_info("itest dir %s", c->base);
}

static int
rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)flag; (void)ftw;
    chmod(p, 0700);
    return remove(p);
}

void
it_fini(it_ctx *c)
{
    if (getenv("ITEST_KEEP"))
        return;
    nftw(c->base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

char *
it_slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while ((n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len - 1 == 0)
            buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    buf[len] = '\0';
    return buf;
}

void
it_spawn(it_ctx *c, it_run *r, const char *outdir, const char *const *argv, const char *const *env)
{
    memset(r, 0, sizeof *r);
    int k = c->nruns++;
    snprintf(r->out_path, sizeof r->out_path, "%s/run%d.out", c->io, k);
    snprintf(r->err_path, sizeof r->err_path, "%s/run%d.err", c->io, k);

    const char *envp[64];
    char pre[1024], own_pre[1024], outv[PATH_MAX + 512]; /* long outdirs are tested */
    size_t ne = 0;
    int own_preload = 0;
    for (size_t i = 0; env && env[i]; i++)
        own_preload |= !strncmp(env[i], "LD_PRELOAD=", 11);
    envp[ne++] = "PATH=/usr/local/bin:/usr/bin:/bin";
    /* Under the sanitizer tier (tools/sanitize.sh) the runtime must be the
     * first object loaded and its options must reach the program. */
    const char *rt = getenv("RS_SANITIZER_RUNTIME");
    rt = rt && *rt ? rt : NULL;
    snprintf(pre, sizeof pre, "LD_PRELOAD=%s%s%s", rt ? rt : "", rt ? " " : "", RS_SHIM_PATH);
    if (!own_preload)
        envp[ne++] = pre;
    static const char *const san_vars[] = {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"};
    char san[3][1024];
    for (size_t i = 0; i < 3; i++) {
        const char *v = getenv(san_vars[i]);
        size_t k = strlen(san_vars[i]);
        int own = 0; /* a test's own setting replaces the inherited one */
        for (size_t j = 0; env && env[j]; j++)
            own |= !strncmp(env[j], san_vars[i], k) && env[j][k] == '=';
        if (v && !own &&
            snprintf(san[i], sizeof san[i], "%s=%s", san_vars[i], v) < (int)sizeof san[i])
            envp[ne++] = san[i];
    }
    if (outdir) {
        snprintf(outv, sizeof outv, "RECOMPSHIM_OUT=%s", outdir);
        envp[ne++] = outv;
    }
    for (size_t i = 0; env && env[i] && ne < 63; i++) {
        envp[ne++] = env[i];
        if (rt && !strncmp(env[i], "LD_PRELOAD=", 11)) {
            snprintf(own_pre, sizeof own_pre, "LD_PRELOAD=%s %s", rt, env[i] + 11);
            envp[ne - 1] = own_pre;
        }
    }
    envp[ne] = NULL;

    fflush(NULL);
    pid_t pid = fork();
    cr_assert(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        int o = open(r->out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = open(r->err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int in = open("/dev/null", O_RDONLY);
        if (o < 0 || e < 0 || in < 0)
            _exit(126);
        dup2(in, 0);
        dup2(o, 1);
        dup2(e, 2);
        if (chdir(c->io) != 0)
            _exit(126);
        execve(argv[0], (char *const *)argv, (char *const *)envp);
        dprintf(2, "itest: exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    r->pid = pid;
}

void
it_wait(it_run *r)
{
    int st = 0;
    for (int i = 0; i < RUN_TIMEOUT_S * 100; i++) {
        pid_t w = waitpid(r->pid, &st, WNOHANG);
        if (w == r->pid)
            goto done;
        sleep_ms(10);
    }
    kill(r->pid, SIGKILL);
    waitpid(r->pid, &st, 0);
    cr_log_error("itest: %s timed out, killed", r->out_path);
done:
    r->status = st;
    r->exited = WIFEXITED(st);
    r->code = r->exited ? WEXITSTATUS(st) : -1;
    r->signaled = WIFSIGNALED(st);
    r->sig = r->signaled ? WTERMSIG(st) : 0;
    r->out = it_slurp(r->out_path);
    r->err = it_slurp(r->err_path);
    if (!r->out)
        r->out = strdup("");
    if (!r->err)
        r->err = strdup("");
}

int
it_wait_output(it_run *r, const char *text)
{
    for (int i = 0; i < 3000; i++) {
        char *s = it_slurp(r->out_path);
        int found = s && strstr(s, text);
        free(s);
        if (found)
            return 1;
        if (waitpid(r->pid, &r->status, WNOHANG) == r->pid) {
            r->pid = -1;
            return 0;
        }
        sleep_ms(10);
    }
    return 0;
}

void
it_run_prog(it_ctx *c, it_run *r, const char *outdir, const char *const *argv, const char *const *env)
{
    it_spawn(c, r, outdir, argv, env);
    it_wait(r);
}

void
it_run_free(it_run *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

/* ---- files ---- */

typedef struct strvec {
    char **v;
    size_t n, cap;
} strvec;

static void
sv_push(strvec *s, const char *str)
{
    if (s->n == s->cap)
        s->v = realloc(s->v, (s->cap = s->cap ? s->cap * 2 : 16) * sizeof *s->v);
    s->v[s->n++] = strdup(str);
}

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void
walk(const char *dir, strvec *s, const char *suffix)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode))
            walk(p, s, suffix);
        else if (S_ISREG(st.st_mode)) {
            size_t l = strlen(p), sl = suffix ? strlen(suffix) : 0;
            if (!suffix || (l >= sl && !strcmp(p + l - sl, suffix)))
                sv_push(s, p);
        }
    }
    closedir(d);
}

size_t
it_find_traces(const char *dir, char ***paths)
{
    strvec s = { 0 };
    walk(dir, &s, ".rstrace");
    if (s.n)
        qsort(s.v, s.n, sizeof *s.v, cmp_str);
    *paths = s.v;
    return s.n;
}

size_t
it_count_files(const char *dir)
{
    strvec s = { 0 };
    walk(dir, &s, NULL);
    it_free_paths(s.v, s.n);
    return s.n;
}

size_t
it_list_subdirs(const char *dir, char ***names)
{
    strvec s = { 0 };
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[1024];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            sv_push(&s, e->d_name);
    }
    if (d)
        closedir(d);
    if (s.n)
        qsort(s.v, s.n, sizeof *s.v, cmp_str);
    *names = s.v;
    return s.n;
}

void
it_free_paths(char **paths, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(paths[i]);
    free(paths);
}

/* ---- dump ---- */

void
it_dump_trace(it_dump *d, const char *path)
{
    memset(d, 0, sizeof *d);
    char outp[] = "/tmp/rs-itest-dump-XXXXXX", errp[] = "/tmp/rs-itest-dumperr-XXXXXX";
    int o = mkstemp(outp), e = mkstemp(errp);
    cr_assert(o >= 0 && e >= 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        dup2(o, 1);
        dup2(e, 2);
        char *const argv[] = { (char *)RS_DUMP_PATH, (char *)path, NULL };
        char *const envp[] = { "PATH=/usr/bin:/bin", NULL };
        execve(RS_DUMP_PATH, argv, envp);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    close(o);
    close(e);
    d->rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    d->text = it_slurp(outp);
    d->err = it_slurp(errp);
    unlink(outp);
    unlink(errp);
    if (!d->text)
        d->text = strdup("");
    if (!d->err)
        d->err = strdup("");
    /* split */
    size_t cap = 64;
    d->lines = malloc(cap * sizeof *d->lines);
    char *save = NULL, *copy = strdup(d->text);
    for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        if (d->nlines == cap)
            d->lines = realloc(d->lines, (cap *= 2) * sizeof *d->lines);
        d->lines[d->nlines++] = strdup(l);
    }
    free(copy);
}

void
it_dump_free(it_dump *d)
{
    for (size_t i = 0; i < d->nlines; i++)
        free(d->lines[i]);
    free(d->lines);
    free(d->text);
    free(d->err);
    memset(d, 0, sizeof *d);
}

const char *
it_line(const it_dump *d, const char *prefix)
{
    size_t l = strlen(prefix);
    for (size_t i = 0; i < d->nlines; i++)
        if (!strncmp(d->lines[i], prefix, l))
            return d->lines[i];
    return NULL;
}

/* Tokens: key=value, value either bare (to next space) or "quoted" with
 * backslash escapes. Returns pointer past token; sets key/val spans. */
static const char *
next_token(const char *p, const char **ks, size_t *kl, const char **vs, size_t *vl)
{
    while (*p == ' ')
        p++;
    if (!*p)
        return NULL;
    *ks = p;
    while (*p && *p != '=' && *p != ' ')
        p++;
    *kl = (size_t)(p - *ks);
    if (*p != '=') {
        *vs = p;
        *vl = 0;
        return p;
    }
    p++;
    if (*p == '"') {
        p++;
        *vs = p;
        while (*p && *p != '"') {
            if (*p == '\\' && p[1])
                p++;
            p++;
        }
        *vl = (size_t)(p - *vs);
        if (*p == '"')
            p++;
    } else {
        *vs = p;
        while (*p && *p != ' ')
            p++;
        *vl = (size_t)(p - *vs);
    }
    return p;
}

int
it_field(const char *line, const char *key, char *buf, size_t n)
{
    const char *ks, *vs;
    size_t kl, vl;
    size_t klen = strlen(key);
    for (const char *p = line; (p = next_token(p, &ks, &kl, &vs, &vl));) {
        if (kl == klen && !strncmp(ks, key, kl) && ks[kl] == '=') {
            if (vl >= n)
                vl = n - 1;
            memcpy(buf, vs, vl);
            buf[vl] = '\0';
            return 1;
        }
    }
    return 0;
}

unsigned long long
it_field_u64(const char *line, const char *key)
{
    char buf[128];
    cr_assert(line != NULL, "no line to read %s from", key);
    cr_assert(it_field(line, key, buf, sizeof buf), "no field %s in: %s", key, line);
    return strtoull(buf, NULL, 0);
}

void
it_kind(const char *line, char *buf, size_t n)
{
    size_t i = 0;
    buf[0] = '\0';
    while (line[i] && line[i] != ' ' && i + 1 < n)
        i++;
    for (size_t j = 0; j < i; j++)
        if (!((line[j] >= 'A' && line[j] <= 'Z') || line[j] == '_'))
            return;
    memcpy(buf, line, i);
    buf[i] = '\0';
}

char *
it_norm(const char *line)
{
    static const char *const drop[] = { "t", "tid", "caller", "caller_lib", NULL };
    size_t cap = strlen(line) + 1, len = 0;
    char *out = malloc(cap);
    const char *ks, *vs;
    size_t kl, vl;
    const char *prev = line;
    for (const char *p = line; (p = next_token(p, &ks, &kl, &vs, &vl)); prev = p) {
        int skip = 0;
        for (int i = 0; drop[i]; i++)
            if (kl == strlen(drop[i]) && !strncmp(ks, drop[i], kl) && ks[kl] == '=')
                skip = 1;
        if (skip)
            continue;
        (void)prev;
        size_t tl = (size_t)(p - ks);
        if (len)
            out[len++] = ' ';
        memcpy(out + len, ks, tl);
        len += tl;
    }
    out[len] = '\0';
    return out;
}

static int
kind_in(const char *kind, const char *kinds)
{
    size_t kl = strlen(kind);
    if (!kl)
        return 0;
    for (const char *p = kinds; (p = strstr(p, kind)); p += kl)
        if ((p == kinds || p[-1] == ' ') && (p[kl] == ' ' || p[kl] == '\0'))
            return 1;
    return 0;
}

size_t
it_select(const it_dump *d, const char *kinds, long tid, char ***out)
{
    strvec s = { 0 };
    for (size_t i = 0; i < d->nlines; i++) {
        char kind[32], buf[64];
        it_kind(d->lines[i], kind, sizeof kind);
        if (!kind_in(kind, kinds))
            continue;
        if (!strcmp(kind, "MEMINFO") && it_field(d->lines[i], "reason", buf, sizeof buf) &&
            !strcmp(buf, "sample"))
            continue;
        if (tid > 0 && (!it_field(d->lines[i], "tid", buf, sizeof buf) || atol(buf) != tid))
            continue;
        char *n = it_norm(d->lines[i]);
        sv_push(&s, n);
        free(n);
    }
    *out = s.v;
    return s.n;
}

void
it_free_lines(char **v, size_t n)
{
    it_free_paths(v, n);
}

/* Exact match, or prefix match when the expected record ends with '*'. */
static int
seq_match(const char *got, const char *exp)
{
    size_t l = strlen(exp);
    if (l && exp[l - 1] == '*')
        return !strncmp(got, exp, l - 1);
    return !strcmp(got, exp);
}

void
it_expect_seq(const it_dump *d, const char *kinds, long tid, const char *const *expected,
              const char *what)
{
    char **got;
    size_t n = it_select(d, kinds, tid, &got);
    size_t ne = 0;
    while (expected[ne])
        ne++;
    int same = n == ne;
    for (size_t i = 0; same && i < n; i++)
        same = seq_match(got[i], expected[i]);
    if (!same) {
        size_t cap = 4096;
        char *msg = malloc(cap);
        size_t len = (size_t)snprintf(msg, cap, "%s: records [%s] tid %ld differ\n", what, kinds, tid);
        for (size_t i = 0; i < (n > ne ? n : ne); i++) {
            const char *g = i < n ? got[i] : "(none)";
            const char *e = i < ne ? expected[i] : "(none)";
            size_t need = strlen(g) + strlen(e) + 64;
            if (len + need >= cap)
                msg = realloc(msg, cap = (len + need) * 2);
            len += (size_t)snprintf(msg + len, cap - len, "  %s #%zu\n    expected: %s\n    got:      %s\n",
                                    i < n && i < ne && seq_match(g, e) ? "ok" : "!!", i, e, g);
        }
        cr_log_error("%s", msg);
        cr_assert_fail("%s", msg);
    }
    it_free_lines(got, n);
}

size_t
it_count_rec(const it_dump *d, const char *rec)
{
    size_t c = 0;
    for (size_t i = 0; i < d->nlines; i++) {
        char *n = it_norm(d->lines[i]);
        c += !strcmp(n, rec);
        free(n);
    }
    return c;
}

size_t
it_count_sub(const it_dump *d, const char *sub)
{
    size_t c = 0;
    for (size_t i = 0; i < d->nlines; i++)
        c += strstr(d->lines[i], sub) != NULL;
    return c;
}

int
it_out_field(const char *text, const char *key, char *buf, size_t n)
{
    size_t kl = strlen(key);
    for (const char *p = text; (p = strstr(p, key)); p++) {
        if ((p != text && p[-1] != ' ' && p[-1] != '\n') || p[kl] != '=')
            continue;
        p += kl + 1;
        size_t l = strcspn(p, " \n");
        if (l >= n)
            l = n - 1;
        memcpy(buf, p, l);
        buf[l] = '\0';
        return 1;
    }
    return 0;
}

void
it_run_traced(it_ctx *c, it_run *r, it_dump *d, const char *const *argv, const char *const *env)
{
    it_run_prog(c, r, c->out, argv, env);
    cr_assert(r->exited && r->code == 0, "%s: status %#x (exit %d, signal %d)\nstdout:\n%s\nstderr:\n%s",
              argv[0], r->status, r->code, r->sig, r->out, r->err);
    char **paths;
    size_t n = it_find_traces(c->out, &paths);
    cr_assert(n == 1, "%s: expected 1 trace under %s, found %zu", argv[0], c->out, n);
    it_dump_trace(d, paths[0]);
    cr_assert(d->rc == 0, "recomp-dump %s: exit %d\n%s", paths[0], d->rc, d->err);
    it_free_paths(paths, n);
}
