// A fused causal attention (flash attention): softmax(q·kᵀ/√hs, causal)·v computed tile by tile on chip, the [T,T]
// scores never written to memory. Forward keeps each row's softmax statistics [B,NH,T] (fp32) for backward instead
// of the probabilities, and backward recomputes the scores from q and k. q, k, v, their gradients and the output
// are read and written where they lie in qkv[B,T,3C], dqkv[B,T,3C] and out[B,T,C] (compute/attention_layout.hpp).
// All work is issued on the backend's compute stream; workspace is device memory of workspace_bytes().
#pragma once
#include <cstddef>
#include <string>

#include "dptrain/core/bf16.hpp"

namespace dptrain {

class FusedAttention {
 public:
  virtual ~FusedAttention() = default;
  // "fused (<library> <version>)", for the start-up lines.
  virtual std::string name() const = 0;
  // Why heads of this shape cannot be computed (one line naming the shape and the library's reason), empty where
  // they can; decided once per shape.
  virtual std::string unsupported(std::size_t T, std::size_t C, std::size_t NH) = 0;
  // The device workspace forward and backward need on B windows; their plans are made now, once per shape, so
  // that no step builds one.
  virtual std::size_t workspace_bytes(std::size_t B, std::size_t T, std::size_t C, std::size_t NH) = 0;
  // out[B,T,C] = attention(qkv); stats[B,NH,T].
  virtual void forward(bf16* out, float* stats, const bf16* qkv, std::size_t B, std::size_t T, std::size_t C,
                       std::size_t NH, void* workspace) = 0;
  // dqkv[B,T,3C] = ∂/∂qkv (written, not added), from dout[B,T,C] and the forward's qkv, out and stats.
  virtual void backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* stats,
                        std::size_t B, std::size_t T, std::size_t C, std::size_t NH, void* workspace) = 0;
};

}  // namespace dptrain
