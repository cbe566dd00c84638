/* dlsym_trampoline.S: the shim's exported dlsym.
 *
 * glibc's dlsym resolves RTLD_NEXT and RTLD_DEFAULT relative to its caller
 * (RETURN_ADDRESS(0)), so a C forwarder would make every other library's
 * dlsym(RTLD_NEXT, ...) start its search after the shim. For those two
 * handles this stub jumps to glibc's dlsym with the caller's return address
 * untouched; lookups on a real handle (libcudart's and NCCL's
 * dlsym(libcuda, "cuGetProcAddress_v2"), PyTorch's older dlsym(libcuda,
 * "cuMemCreate")) go to rs_dlsym_handle, which may hand back a wrapper
 * (hooks_driver.c). */
#if defined(__x86_64__)
    .text
    .globl dlsym
    .type dlsym, @function
dlsym:
    .cfi_startproc
    cmpq $-1, %rdi                  /* RTLD_NEXT */
    je 1f
    testq %rdi, %rdi                /* RTLD_DEFAULT */
    je 1f
    jmp rs_dlsym_handle
1:  movq rs_real_dlsym(%rip), %rax
    testq %rax, %rax
    jz 2f
    jmp *%rax
2:  pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    subq $8, %rsp
    .cfi_adjust_cfa_offset 8
    call rs_resolve_real_dlsym
    addq $8, %rsp
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    testq %rax, %rax
    jz 3f
    jmp *%rax
3:  ret
    .cfi_endproc
    .size dlsym, .-dlsym
#elif defined(__aarch64__)
    .text
    .globl dlsym
    .type dlsym, %function
dlsym:
    .cfi_startproc
    cmn x0, #1                      /* RTLD_NEXT */
    b.eq 1f
    cbz x0, 1f                      /* RTLD_DEFAULT */
    b rs_dlsym_handle
1:  adrp x16, rs_real_dlsym
    ldr x16, [x16, :lo12:rs_real_dlsym]
    cbz x16, 2f
    br x16
2:  stp x29, x30, [sp, #-32]!
    .cfi_adjust_cfa_offset 32
    .cfi_rel_offset x29, 0
    .cfi_rel_offset x30, 8
    stp x0, x1, [sp, #16]
    bl rs_resolve_real_dlsym
    mov x16, x0
    ldp x0, x1, [sp, #16]
    ldp x29, x30, [sp], #32
    .cfi_adjust_cfa_offset -32
    .cfi_restore x29
    .cfi_restore x30
    cbz x16, 3f
    br x16
3:  mov x0, #0
    ret
    .cfi_endproc
    .size dlsym, .-dlsym
#else
#error "dlsym trampoline: x86_64 and aarch64 only"
#endif
    .section .note.GNU-stack,"",%progbits
