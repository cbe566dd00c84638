/* cudnn_te.c: the one libcudnn.so.9 call the fake GPU answers (issue 16).
 * cuDNN is otherwise a load-only stub of the fake GPU (every other call prints
 * one line and returns CUDNN_STATUS_NOT_SUPPORTED: nothing here runs cuDNN's
 * graphs). Transformer Engine 2.12.0's PyTorch package asks for the version at
 * start-up (transformer_engine.pytorch.utils.get_cudnn_version, through the
 * extension's get_cudnn_version, for its attention backend selection), and
 * the generated stub's status (3000) read as cuDNN 0.30.0.
 */
#include <stddef.h>

#define EXPORT __attribute__((visibility("default")))

/* The cuDNN release PyTorch 2.11.0's CUDA 13.0 wheel pins
 * (nvidia-cudnn-cu13==9.19.0.56, torch's METADATA), in cuDNN 9's encoding
 * CUDNN_MAJOR * 10000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL (cudnn_version.h). */
#define FAKE_CUDNN_VERSION (9 * 10000 + 19 * 100 + 0)

/* cudnnGetVersion(): the version of the (fake) cuDNN library, encoded as
 * above; no errors (the real call has none). */
EXPORT size_t
cudnnGetVersion(void)
{
    return FAKE_CUDNN_VERSION;
}
