/* test_pystack.c: the shadow-stack core of the shim's Python frames
 * (shim/pystack.c), without Python: code objects are opaque identities, so
 * plain numbers stand for them. No trace file is open: records are dropped,
 * the interning and the stack discipline are what is checked. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "pystack.h"

/* The writer calls these NVTX hooks; the NVTX module is not linked here. */
void rs_nvtx_replay_definitions(void) {}
void rs_nvtx_thread_attach(void) {}
void rs_nvtx_atfork_prepare(void) {}
void rs_nvtx_atfork_prepare_leaf(void) {}
void rs_nvtx_atfork_parent(void) {}
void rs_nvtx_atfork_child(void) {}
void rs_nvtx_setup_env(void) {}
const char *rs_nvtx_foreign_path(void) { return NULL; }

static void
push(uint64_t code)
{
    char name[32];
    int n = snprintf(name, sizeof name, "f%llu", (unsigned long long)code);
    rs_pystack_push(code, name, (size_t)n, "/x.py", 5, 1);
}

static void
reset(void)
{
    memset(&t_py, 0, sizeof t_py);
}

Test(pystack, nested_calls_and_returns)
{
    reset();
    cr_expect_eq(rs_pystack_current(), 0, "no frame: no stack");
    push(0x10);
    uint32_t a = rs_pystack_current();
    push(0x20);
    uint32_t ab = rs_pystack_current();
    cr_expect(a && ab && a != ab);
    cr_expect(ab > a, "a stack is numbered after its parent");
    rs_pystack_pop(0x20);
    cr_expect_eq(rs_pystack_current(), a);
    rs_pystack_pop(0x10);
    cr_expect_eq(rs_pystack_current(), 0);
    /* the same path again: the same interned ids */
    push(0x10);
    push(0x20);
    cr_expect_eq(rs_pystack_current(), ab);
    rs_pystack_pop(0x20);
    rs_pystack_pop(0x10);
    /* the same code from another caller: another stack */
    push(0x20);
    cr_expect_neq(rs_pystack_current(), ab);
    cr_expect_eq(rs_pystack_frame_of(0x20), rs_pystack_frame_of(0x20));
    rs_pystack_pop(0x20);
}

Test(pystack, a_frame_entered_before_the_install_is_ignored)
{
    reset();
    rs_pystack_pop(0x99);                   /* nothing pushed: ignored */
    cr_expect_eq(t_py.depth, 0);
    push(0x10);
    rs_pystack_pop(0x98);                   /* not on the stack: ignored */
    cr_expect_eq(t_py.depth, 1);
    rs_pystack_pop(0x10);
}

Test(pystack, a_missed_exit_pops_the_levels_above)
{
    reset();
    push(0x10);
    uint32_t a = rs_pystack_current();
    push(0x20);
    push(0x30);
    rs_pystack_pop(0x20);                   /* 0x30's exit was missed */
    cr_expect_eq(t_py.depth, 1);
    cr_expect_eq(rs_pystack_current(), a);
    rs_pystack_pop(0x10);
}

Test(pystack, recursion_pops_the_topmost)
{
    reset();
    push(0x10);
    uint32_t one = rs_pystack_current();
    push(0x10);
    uint32_t two = rs_pystack_current();
    cr_expect_neq(one, two);
    rs_pystack_pop(0x10);
    cr_expect_eq(t_py.depth, 1);
    cr_expect_eq(rs_pystack_current(), one);
    rs_pystack_pop(0x10);
}

Test(pystack, deeper_than_the_cap_keeps_the_capped_stack)
{
    reset();
    uint32_t at_cap = 0;
    for (uint64_t i = 1; i <= RS_PY_DEPTH + 44; i++) {
        push(0x1000 + i);
        if (i == RS_PY_DEPTH)
            at_cap = rs_pystack_current();
    }
    cr_expect_eq(t_py.depth, RS_PY_DEPTH + 44);
    cr_expect_eq(rs_pystack_current(), at_cap, "past the cap: the level-256 stack");
    for (uint64_t i = RS_PY_DEPTH + 44; i > RS_PY_DEPTH; i--)
        rs_pystack_pop(0x1000 + i);
    cr_expect_eq(t_py.depth, RS_PY_DEPTH);
    cr_expect_eq(rs_pystack_current(), at_cap);
    for (uint64_t i = RS_PY_DEPTH; i > 0; i--)
        rs_pystack_pop(0x1000 + i);
    cr_expect_eq(rs_pystack_current(), 0);
}

Test(pystack, a_lost_thread_reports_no_stack)
{
    reset();
    push(0x10);
    t_py.lost = 1;                          /* another profiler replaced the shim's */
    cr_expect_eq(rs_pystack_current(), 0, "unknown, never stale");
    reset();
}

/* The frame table holds 32768 code objects; past that a new frame's level is
 * unknown (0), and so is every level above it: never a shorter stack. Runs
 * last in its own process (criterion forks per test). */
Test(pystack, a_full_frame_table_gives_unknown_never_shorter)
{
    reset();
    for (uint64_t i = 1; i <= 32768; i++) {
        push(0x100000 + i);
        rs_pystack_pop(0x100000 + i);
    }
    push(0x10);                             /* known */
    cr_expect_eq(rs_pystack_frame_of(0x10), 0, "the table is full");
    cr_expect_eq(rs_pystack_current(), 0, "an unknown frame: stack unknown");
    push(0x100001);                         /* a frame interned before, below an unknown one */
    cr_expect_eq(rs_pystack_current(), 0, "above an unknown level: unknown too");
    rs_pystack_pop(0x100001);
    rs_pystack_pop(0x10);
    push(0x100002);                         /* interned, at the root: named */
    cr_expect_neq(rs_pystack_current(), 0);
    rs_pystack_pop(0x100002);
}
