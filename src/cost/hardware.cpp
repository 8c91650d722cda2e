// Device and model presets of the systems model.
#include "dptrain/cost/hardware.hpp"

#include <array>
#include <cctype>
#include <string>

#include "dptrain/core/error.hpp"

namespace dptrain::cost {
namespace {

// Dense BF16 peak without sparsity (docs/systems-model.md "Presets").
constexpr std::array kDevicePresets = {
    DevicePreset{"h100", "H100 SXM", 989e12},
    DevicePreset{"h200", "H200", 989e12},
    DevicePreset{"a100", "A100", 312e12},
};

// docs/systems-model.md "Reference": 4M-token batches of 4096-token sequences.
constexpr std::array kModelPresets = {
    ModelPreset{"llama-7b",
                ModelShape{.params = 6'738'149'376, .layers = 32, .width = 4096, .seq = 4096,
                           .tokens_per_step = 1'048'576}},
};

template <typename Preset, std::size_t Count>
const Preset* find_by_name(const std::array<Preset, Count>& presets, std::string_view name) {
  for (const Preset& preset : presets) {
    if (preset.name == name) return &preset;
  }
  return nullptr;
}

}  // namespace

std::span<const DevicePreset> device_presets() { return kDevicePresets; }
const DevicePreset* find_device_preset(std::string_view name) { return find_by_name(kDevicePresets, name); }

const DevicePreset* device_preset_for_gpu(std::string_view gpu_name) {
  // "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB". The PCIe and NVL cards have other peaks
  // (H100 PCIe 756, H100 NVL and H200 NVL about 835 TFLOP/s dense BF16), and a MIG slice ("… MIG 1g.18gb") has a
  // fraction of its GPU's: for them the peak is measured.
  for (const std::string_view other : {"PCIe", "NVL", " MIG "})
    if (gpu_name.find(other) != std::string_view::npos) return nullptr;
  for (const DevicePreset& preset : kDevicePresets) {
    std::string upper(preset.name);
    for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
    if (gpu_name.find(upper) != std::string_view::npos) return &preset;
  }
  return nullptr;
}

std::span<const ModelPreset> model_presets() { return kModelPresets; }
const ModelPreset* find_model_preset(std::string_view name) { return find_by_name(kModelPresets, name); }

void validate(const ModelShape& shape) {
  require(shape.params > 0, "model parameters N = {} must be positive", shape.params);
  require(shape.layers > 0, "model layers L = {} must be positive", shape.layers);
  require(shape.width > 0, "model width H = {} must be positive", shape.width);
  require(shape.seq > 0, "sequence length Q = {} must be positive", shape.seq);
  require(shape.tokens_per_step > 0, "tokens per step D = {} must be positive", shape.tokens_per_step);
}

}  // namespace dptrain::cost
