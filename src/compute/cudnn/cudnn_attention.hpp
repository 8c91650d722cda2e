// The cuda backend's fused attention: cuDNN's scaled-dot-product attention (flash attention) through the cuDNN
// frontend's graph API, BF16 in and out, fp32 softmax and accumulation, the causal mask, deterministic backward.
#pragma once
#include <cuda_runtime_api.h>

#include <memory>

#include "../bf16/fused_attention.hpp"

namespace dptrain::cuda {

// cuDNN on `stream` (the backend's compute stream). Throws std::runtime_error with cuDNN's message where cuDNN
// cannot start (no usable library or GPU).
std::unique_ptr<FusedAttention> make_cudnn_attention(cudaStream_t stream);

}  // namespace dptrain::cuda
