// The shape of the GPT-2-style model: vocabulary, context length, depth, width, heads.
#pragma once
#include <cstdint>
#include <string>

namespace dptrain {

struct ModelConfig {
  int vocab = 256;     // V: token ids are 0..V-1 (bytes by default)
  int seq = 128;       // Q: context length (window length); also the number of learned positions
  int layers = 4;      // L
  int width = 256;     // H: model width; the MLP is 4H wide
  int heads = 4;       // attention heads; H % heads == 0

  int head_dim() const { return width / heads; }
  // The logits' row length in the activations: V rounded up to a multiple of 64 (GPT-2's 50,257 → 50,304), so that
  // every row of logits starts 128-byte aligned and the LM head's GEMMs get leading dimensions cuBLASLt's fast
  // kernels accept (an odd one allows 2-byte loads only). The columns past V are never written nor read.
  int logits_row_length() const { return (vocab + 63) / 64 * 64; }
  bool operator==(const ModelConfig&) const = default;
};

// Throws UserError naming the offending flag and value (zero --layers, --heads not dividing --width, ...).
void validate(const ModelConfig& config);

// Exact number of parameters N (embeddings included; the LM head is tied to the token embedding).
std::int64_t parameter_count(const ModelConfig& config);

// Model FLOPs per token for training: 6N + 12·L·H·Q (docs/systems-model.md; PaLM appendix B).
double training_flops_per_token(const ModelConfig& config);

std::string describe(const ModelConfig& config);

}  // namespace dptrain
