// The bytes of the model's activation arena (compute/gpt.hpp) for a given shape and number of windows, computed
// from the configuration alone: the memory estimate needs it before anything is allocated. Gpt's own table must
// come to the same total (tested for equality).
#pragma once
#include <cstddef>

#include "dptrain/model/config.hpp"

namespace dptrain {

// Arena bytes of a Gpt for up to `windows` windows, activations of `activation_bytes` per element, a head
// gradient of `gradient_bytes`, and `attention_saved_bytes` kept by attention per window and head
// (Backend::attention_saved_bytes: seq² activations, or a fused attention's seq fp32 statistics), each tensor at a
// 256-byte aligned offset as ActivationArena places them. In double: a run too large to allocate must still be
// described, not overflow.
double activation_arena_bytes(const ModelConfig& config, double windows, double activation_bytes,
                              double gradient_bytes, double attention_saved_bytes);

}  // namespace dptrain
