// The other inputs of the systems model: devices (peak dense BF16 FLOP/s), the matmul efficiency η, and the
// shape of a model as plain numbers (cost/ never includes model/; apps turn a ModelConfig into a ModelShape).
#pragma once
#include <cstdint>
#include <span>
#include <string_view>

namespace dptrain::cost {

// η: the fraction of peak that the model's matmuls reach, unless measured (docs/systems-model.md).
inline constexpr double kDefaultMatmulEfficiency = 0.473;

struct DevicePreset {
  std::string_view name;   // what `--device` accepts: "h100"
  std::string_view label;  // "H100 SXM"
  double peak_flops;       // P: dense BF16 FLOP/s of one device
};

// h100 and h200: 989 TFLOP/s; a100: 312 TFLOP/s.
std::span<const DevicePreset> device_presets();
const DevicePreset* find_device_preset(std::string_view name);  // nullptr when unknown
// The preset of a GPU by the name its driver reports ("NVIDIA H200"); nullptr for any other (an H100 PCIe, an H100
// or H200 NVL too).
const DevicePreset* device_preset_for_gpu(std::string_view gpu_name);

struct ModelShape {
  std::int64_t params = 0;           // N: all parameters, embeddings included
  int layers = 0;                    // L
  int width = 0;                     // H
  int seq = 0;                       // Q: sequence length
  std::int64_t tokens_per_step = 0;  // D: tokens of one global batch, all ranks together

  bool operator==(const ModelShape&) const = default;
};

struct ModelPreset {
  std::string_view name;  // "llama-7b"
  ModelShape shape;
};

// llama-7b: N = 6,738,149,376; L = 32; H = 4096; Q = 4096; D = 1,048,576 (docs/systems-model.md reference).
std::span<const ModelPreset> model_presets();
const ModelPreset* find_model_preset(std::string_view name);  // nullptr when unknown

// Throws UserError unless every field is positive.
void validate(const ModelShape& shape);

}  // namespace dptrain::cost
