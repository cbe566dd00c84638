/* prog_megatron: a tiny "training step" for the analyzer's LD_PRELOAD test.
 * Megatron-named NVTX ranges ([M] in docs/sources.md) around cudaMalloc calls on
 * the main thread (forward) and on a thread named pt_autograd_0 (backward
 * with an mlp recompute replay). Sizes are the known answers of
 * test_shim.c: peak = 1000 + 100 + 2000 + 3000 + 2001 + 3001 + 500 bytes,
 * set by the replayed fc1 of layer 2. */
#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define TL "megatron.core.transformer.transformer_layer.TransformerLayer."
#define CHECK(x)                                                    \
    do {                                                            \
        if ((x) != cudaSuccess) {                                   \
            printf("FAIL: %s\n", #x);                               \
            exit(3);                                                \
        }                                                           \
    } while (0)

static void *g_act[4];

static void
layer(int i, size_t attn, size_t fc1)
{
    nvtxRangePushA(TL "_forward_attention.self_attention");
    nvtxRangePushA("megatron.core.transformer.attention.forward.core_attention");
    CHECK(cudaMalloc(&g_act[2 * i], attn));
    nvtxRangePop();
    nvtxRangePop();
    nvtxRangePushA(TL "_run_mlp.mlp");
    nvtxRangePushA("megatron.core.transformer.mlp.forward.linear_fc1");
    CHECK(cudaMalloc(&g_act[2 * i + 1], fc1));
    nvtxRangePop();
    nvtxRangePop();
}

static void *
backward(void *arg)
{
    void *replay;
    (void)arg;
    pthread_setname_np(pthread_self(), "pt_autograd_0");
    nvtxRangePushA("megatron.core.transformer.mlp.forward.linear_fc1"); /* replay */
    CHECK(cudaMalloc(&replay, 500));
    nvtxRangePop();
    CHECK(cudaFree(replay));
    for (int i = 3; i >= 0; i--)
        CHECK(cudaFree(g_act[i]));
    return NULL;
}

int
main(void)
{
    void *params, *emb;
    pthread_t th;
    CHECK(cudaMalloc(&params, 1000));
    nvtxRangePushA("megatron.core.models.common.embeddings.language_model_embedding.forward");
    CHECK(cudaMalloc(&emb, 100));
    nvtxRangePop();
    layer(0, 2000, 3000);
    layer(1, 2001, 3001);
    if (pthread_create(&th, NULL, backward, NULL) != 0)
        return 3;
    pthread_join(th, NULL);
    CHECK(cudaFree(emb));
    CHECK(cudaFree(params));
    printf("ok\n");
    return 0;
}
