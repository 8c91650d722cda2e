// The parameter layout table: every parameter tensor of the model as (name, shape, offset) in one flat buffer.
// Weights, gradients, the fp32 master copy and Adam's m and v all mirror this layout. Order follows the forward
// pass: embeddings, blocks 0..L-1, final LayerNorm, so a transformer block is one contiguous range.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "dptrain/model/config.hpp"

namespace dptrain {

struct ParameterEntry {
  std::string name;                  // e.g. "h.3.attn.c_attn.weight"
  std::vector<std::size_t> shape;    // PyTorch nn.Linear convention for matrices: [out, in]
  std::size_t offset = 0;            // first element in the flat buffer
  std::size_t numel = 0;
  bool weight_decay = false;         // AdamW decays 2-D weights only (matrices and embeddings)
  bool residual_projection = false;  // initialised with std 0.02/sqrt(2L)
};

// Offsets of one block's tensors.
struct BlockOffsets {
  std::size_t ln1_w, ln1_b;       // [H]
  std::size_t qkv_w, qkv_b;       // [3H, H], [3H]
  std::size_t attn_proj_w, attn_proj_b;  // [H, H], [H]
  std::size_t ln2_w, ln2_b;       // [H]
  std::size_t fc_w, fc_b;         // [4H, H], [4H]
  std::size_t fc_proj_w, fc_proj_b;  // [H, 4H], [H]
  std::size_t begin, end;         // the block's range in the flat buffer
};

// A contiguous range [begin, end) of the flat buffer.
struct FlatRange {
  std::size_t begin = 0, end = 0;
  std::size_t size() const { return end - begin; }
};

class ParameterLayout {
 public:
  explicit ParameterLayout(const ModelConfig& config);

  const ModelConfig& config() const { return config_; }
  const std::vector<ParameterEntry>& entries() const { return entries_; }
  std::size_t total() const { return total_; }  // N

  std::size_t wte() const { return wte_; }  // [V, H], also the LM head (tied)
  std::size_t wpe() const { return wpe_; }  // [Q, H]
  const BlockOffsets& block(int layer) const { return blocks_[layer]; }
  std::size_t lnf_w() const { return lnf_w_; }  // [H]
  std::size_t lnf_b() const { return lnf_b_; }  // [H]

  FlatRange embeddings() const { return {0, blocks_.front().begin}; }
  FlatRange block_range(int layer) const { return {blocks_[layer].begin, blocks_[layer].end}; }
  FlatRange final_norm() const { return {lnf_w_, total_}; }

  const ParameterEntry* find(const std::string& name) const;

 private:
  std::size_t add(std::string name, std::vector<std::size_t> shape, bool decay, bool residual = false);

  ModelConfig config_;
  std::vector<ParameterEntry> entries_;
  std::vector<BlockOffsets> blocks_;
  std::size_t total_ = 0, wte_ = 0, wpe_ = 0, lnf_w_ = 0, lnf_b_ = 0;
};

// GPT-2 initialisation of fp32 parameters [N]: normal(0, 0.02), residual projections 0.02/sqrt(2L), biases 0,
// LayerNorm weights 1. Deterministic in the seed on every platform.
void initialise_parameters(const ParameterLayout& layout, std::uint64_t seed, float* params);

}  // namespace dptrain
