// The datasheet peak of a GPU by the name its driver reports: the SXM cards of the presets, and no preset (so a
// measured peak) for the PCIe and NVL cards, whose peaks are lower.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "dptrain/cost/hardware.hpp"

namespace dptrain::cost {
namespace {

TEST(Hardware, GpuNamesFindTheirPresetOnlyForTheSxmCards) {
  for (const auto& [name, peak] : {std::pair<std::string, double>{"NVIDIA H100 80GB HBM3", 989e12},
                                   {"NVIDIA H200", 989e12},
                                   {"NVIDIA A100-SXM4-80GB", 312e12}}) {
    const DevicePreset* preset = device_preset_for_gpu(name);
    ASSERT_NE(preset, nullptr) << name;
    EXPECT_EQ(preset->peak_flops, peak) << name;
  }
  for (const char* name : {"NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H200 NVL", "NVIDIA H200 MIG 1g.18gb",
                           "NVIDIA A100-SXM4-40GB MIG 3g.20gb", "NVIDIA L40S", ""})
    EXPECT_EQ(device_preset_for_gpu(name), nullptr) << name;
}

}  // namespace
}  // namespace dptrain::cost
