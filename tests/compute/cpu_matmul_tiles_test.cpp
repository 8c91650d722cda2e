// The cpu backend's matmuls cut into tiles for its threads (windows × column blocks, dw by row blocks; each tile a
// single-threaded sgemm): the same bits for every thread count, and a window's rows and its dw terms the same
// whatever other windows share the call, which is what micro-batch invariance (BackendGuarantees) rests on.
// Shapes not multiples of the 16-column blocks; 1 to 4 threads; 1 to 5 windows per call.
#include <gtest/gtest.h>
#include <omp.h>

#include <vector>

#include "dptrain/compute/backend.hpp"

namespace dptrain {
namespace {

constexpr std::size_t kT = 7, kC = 40, kOC = 72, kWindows = 5;

std::vector<float> values(std::size_t n, std::uint32_t seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = float((i * 2654435761u + seed * 40503u) % 2001) / 1000.0f - 1.0f;
  return v;
}

struct Matmuls {
  std::vector<float> out, din, dw, dbias;
};

// Forward and backward over kWindows windows, issued in calls of `per_call` windows, on `threads` threads.
Matmuls run(int threads, std::size_t per_call) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  auto backend = make_cpu_backend();
  const std::size_t N = kWindows * kT;
  const auto in = values(N * kC, 1), w = values(kOC * kC, 2), bias = values(kOC, 3), dout = values(N * kOC, 4);
  Matmuls m{std::vector<float>(N * kOC), values(N * kC, 5), values(kOC * kC, 6), values(kOC, 7)};
  for (std::size_t first = 0; first < kWindows; first += per_call) {
    const std::size_t windows = std::min(per_call, kWindows - first), rows = first * kT;
    backend->matmul_forward(m.out.data() + rows * kOC, in.data() + rows * kC, w.data(), bias.data(), windows * kT, kT,
                            kC, kOC);
    backend->matmul_backward(m.din.data() + rows * kC, m.dw.data(), m.dbias.data(), dout.data() + rows * kOC,
                             in.data() + rows * kC, w.data(), windows * kT, kT, kC, kOC);
  }
  omp_set_num_threads(saved);
  return m;
}

TEST(CpuMatmulTiles, EveryThreadCountAndEveryGroupingOfWindowsGivesTheSameBits) {
  const Matmuls reference = run(1, 1);  // one thread, one window per call: plain per-window sgemm
  for (int threads : {1, 2, 3, 4}) {
    for (std::size_t per_call : {std::size_t(1), std::size_t(2), std::size_t(5)}) {
      SCOPED_TRACE(testing::Message() << threads << " threads, " << per_call << " windows per call");
      const Matmuls m = run(threads, per_call);
      EXPECT_EQ(m.out, reference.out);
      EXPECT_EQ(m.din, reference.din);
      EXPECT_EQ(m.dw, reference.dw);
      EXPECT_EQ(m.dbias, reference.dbias);
    }
  }
}

TEST(CpuMatmulTiles, TheProductIsTheMatrixProduct) {
  // Guards the tiles' offsets: one output, one input gradient and one weight gradient element against double.
  const Matmuls m = run(3, 2);
  const std::size_t N = kWindows * kT;
  const auto in = values(N * kC, 1), w = values(kOC * kC, 2), bias = values(kOC, 3), dout = values(N * kOC, 4);
  const std::size_t r = 23, o = 61, c = 37;
  double out = bias[o], din = values(N * kC, 5)[r * kC + c], dw = values(kOC * kC, 6)[o * kC + c];
  for (std::size_t k = 0; k < kC; ++k) out += double(in[r * kC + k]) * w[o * kC + k];
  for (std::size_t k = 0; k < kOC; ++k) din += double(dout[r * kOC + k]) * w[k * kC + c];
  for (std::size_t n = 0; n < N; ++n) dw += double(dout[n * kOC + o]) * in[n * kC + c];
  // fp32 sums of ≤ 72 terms of magnitude ≤ 1 (dw: 35 terms plus its start): within 72 · 2⁻²⁴ · 72 of double.
  EXPECT_NEAR(m.out[r * kOC + o], out, 72 * 72 * 6e-8);
  EXPECT_NEAR(m.din[r * kC + c], din, 72 * 72 * 6e-8);
  EXPECT_NEAR(m.dw[o * kC + c], dw, 72 * 72 * 6e-8);
}

}  // namespace
}  // namespace dptrain
