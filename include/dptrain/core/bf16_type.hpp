// The BF16 storage type alone (C++17, no conversions): what device code shares with the host. Conversions are in
// bf16.hpp (host) and kernels/common.cuh (both sides).
#pragma once
#include <cstdint>

namespace dptrain {

struct bf16 {
  std::uint16_t bits = 0;
};
static_assert(sizeof(bf16) == 2);

}  // namespace dptrain
