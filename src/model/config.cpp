// Validation, parameter count and FLOP count of a ModelConfig.
#include "dptrain/model/config.hpp"

#include <fmt/format.h>

#include "dptrain/core/error.hpp"

namespace dptrain {

void validate(const ModelConfig& c) {
  require(c.vocab >= 2 && c.vocab <= 1 << 24, "--vocab must be in [2, 16777216], got {}", c.vocab);
  require(c.seq >= 1 && c.seq <= 1 << 16, "--seq must be in [1, 65536], got {}", c.seq);
  require(c.layers >= 1 && c.layers <= 1024, "--layers must be in [1, 1024], got {}", c.layers);
  require(c.width >= 1 && c.width <= 1 << 16, "--width must be in [1, 65536], got {}", c.width);
  require(c.heads >= 1, "--heads must be at least 1, got {}", c.heads);
  require(c.width % c.heads == 0, "--heads must divide --width: --width {} is not a multiple of --heads {}", c.width,
          c.heads);
}

std::int64_t parameter_count(const ModelConfig& c) {
  const std::int64_t V = c.vocab, Q = c.seq, L = c.layers, H = c.width;
  return V * H + Q * H + L * (12 * H * H + 13 * H) + 2 * H;
}

double training_flops_per_token(const ModelConfig& c) {
  return 6.0 * double(parameter_count(c)) + 12.0 * c.layers * double(c.width) * c.seq;
}

std::string describe(const ModelConfig& c) {
  return fmt::format("GPT L={} H={} heads={} Q={} V={} ({:.2f}M parameters)", c.layers, c.width, c.heads, c.seq,
                     c.vocab, parameter_count(c) / 1e6);
}

}  // namespace dptrain
