/* init.c: the shim's constructor and destructor. */
#include <stdlib.h>

#include "config.h"
#include "stack.h"
#include "tensor_mode.h"
#include "writer.h"

__attribute__((constructor)) static void
rs_init(void)
{
    t_rs.guard++;
    rs_config_load();
    rs_writer_init();
    if (!g_rs_cfg.disable) {
        rs_stack_init();
        rs_nvtx_setup_env();
        rs_tensor_mode_apply();
    }
    t_rs.guard--;
}

__attribute__((destructor)) static void
rs_fini(void)
{
    t_rs.guard++;
    rs_writer_close();
}
