// The flat parameter layout of the GPT-2 model and its initialisation.
#include "dptrain/model/layout.hpp"

#include <cmath>
#include <cstdint>
#include <numbers>

#include "dptrain/core/hash.hpp"

#include <fmt/format.h>

namespace dptrain {

ParameterLayout::ParameterLayout(const ModelConfig& config) : config_(config) {
  validate(config);
  const std::size_t V = config.vocab, Q = config.seq, H = config.width;
  wte_ = add("wte.weight", {V, H}, true);
  wpe_ = add("wpe.weight", {Q, H}, true);
  for (int l = 0; l < config.layers; ++l) {
    const std::string p = fmt::format("h.{}.", l);
    BlockOffsets b{};
    b.begin = total_;
    b.ln1_w = add(p + "ln_1.weight", {H}, false);
    b.ln1_b = add(p + "ln_1.bias", {H}, false);
    b.qkv_w = add(p + "attn.c_attn.weight", {3 * H, H}, true);
    b.qkv_b = add(p + "attn.c_attn.bias", {3 * H}, false);
    b.attn_proj_w = add(p + "attn.c_proj.weight", {H, H}, true, true);
    b.attn_proj_b = add(p + "attn.c_proj.bias", {H}, false);
    b.ln2_w = add(p + "ln_2.weight", {H}, false);
    b.ln2_b = add(p + "ln_2.bias", {H}, false);
    b.fc_w = add(p + "mlp.c_fc.weight", {4 * H, H}, true);
    b.fc_b = add(p + "mlp.c_fc.bias", {4 * H}, false);
    b.fc_proj_w = add(p + "mlp.c_proj.weight", {H, 4 * H}, true, true);
    b.fc_proj_b = add(p + "mlp.c_proj.bias", {H}, false);
    b.end = total_;
    blocks_.push_back(b);
  }
  lnf_w_ = add("ln_f.weight", {H}, false);
  lnf_b_ = add("ln_f.bias", {H}, false);
}

std::size_t ParameterLayout::add(std::string name, std::vector<std::size_t> shape, bool decay, bool residual) {
  std::size_t numel = 1;
  for (std::size_t d : shape) numel *= d;
  entries_.push_back({std::move(name), std::move(shape), total_, numel, decay, residual});
  total_ += numel;
  return entries_.back().offset;
}

const ParameterEntry* ParameterLayout::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

void initialise_parameters(const ParameterLayout& layout, std::uint64_t seed, float* params) {
  SplitMix64 rng{seed};
  const float residual_std = 0.02f / std::sqrt(2.0f * layout.config().layers);
  for (const auto& e : layout.entries()) {
    float* p = params + e.offset;
    const bool is_norm_weight = e.name.ends_with("ln_1.weight") || e.name.ends_with("ln_2.weight") ||
                                e.name == "ln_f.weight";
    if (e.shape.size() == 1) {
      std::fill(p, p + e.numel, is_norm_weight ? 1.0f : 0.0f);
      continue;
    }
    const float std_dev = e.residual_projection ? residual_std : 0.02f;
    for (std::size_t i = 0; i < e.numel; i += 2) {  // Box–Muller gives two normals per draw
      double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
      double r = std::sqrt(-2.0 * std::log(u1)), theta = 2.0 * std::numbers::pi * u2;
      p[i] = float(std_dev * r * std::cos(theta));
      if (i + 1 < e.numel) p[i + 1] = float(std_dev * r * std::sin(theta));
    }
  }
}

}  // namespace dptrain
