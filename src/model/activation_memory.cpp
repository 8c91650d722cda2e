// The activation arena's size from the configuration: the same tensors, in the same order and alignment, as
// Gpt's constructor adds to its ActivationArena.
#include "dptrain/model/activation_memory.hpp"

#include <cmath>
#include <vector>

namespace dptrain {

namespace {

constexpr double kAlignment = 256;  // Memory::kAlignment

}  // namespace

double activation_arena_bytes(const ModelConfig& c, double windows, double A, double G, double saved) {
  const double N = windows * c.seq, C = c.width, V = c.vocab, Vp = c.logits_row_length(), F = 4, I = 4;
  std::vector<double> tensors = {N * I, N * I, N * C * A};  // inputs, targets, embedded
  const double probs = windows * c.heads * saved;
  // Per block: ln1, its mean and rstd, qkv, what attention saves, atty, res2, ln2, its mean and rstd, fch, fch_gelu, out.
  const std::vector<double> block = {N * C * A, N * F,     N * F, 3 * N * C * A, probs, N * C * A, N * C * A,
                                     N * C * A, N * F,     N * F, 4 * N * C * A, 4 * N * C * A, N * C * A};
  for (int l = 0; l < c.layers; ++l) tensors.insert(tensors.end(), block.begin(), block.end());
  // lnf, its mean and rstd, logits (rows of Vp), losses, the head's gradient, then the backward scratch.
  for (double b : {N * C * A, N * F, N * F, N * Vp * A, N * F, V * C * G, N * C * A, N * C * A, 3 * N * C * A,
                   N * C * A, 4 * N * C * A})
    tensors.push_back(b);
  // Every tensor starts at an aligned offset; the last one ends the arena.
  double bytes = 0;
  for (double b : tensors) bytes = std::ceil(bytes / kAlignment) * kAlignment + b;
  return bytes;
}

}  // namespace dptrain
