// The cpu backend's matmuls shared among its threads (windows, and dw by row blocks; each a single-threaded
// sgemm): a window's rows and its dw terms the same whatever other windows share the call, which is what
// micro-batch invariance (BackendGuarantees) rests on.
// Shapes not multiples of the 16-row blocks; 1 to 4 threads; 1 to 5 windows per call; every sgemm library of the
// build (cpu_gemm.hpp).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <limits>
#include <map>
#include <vector>

#include "dptrain/compute/backend.hpp"
#include "dptrain/compute/cpu_gemm.hpp"
#include "dptrain/core/error.hpp"

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

// Forward and backward over kWindows windows, issued in calls of `per_call` windows, on `threads` threads, with
// the sgemm library `gemm`.
Matmuls run(int threads, std::size_t per_call, const std::string& gemm = "openblas") {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  auto backend = make_cpu_backend(gemm);
  const std::size_t N = kWindows * kT;
  const auto in = values(N * kC, 1), w = values(kOC * kC, 2), bias = values(kOC, 3), dout = values(N * kOC, 4);
  // din starts as NaN: the backward writes it without reading; dw and dbias are added to.
  Matmuls m{std::vector<float>(N * kOC), std::vector<float>(N * kC, std::numeric_limits<float>::quiet_NaN()),
            values(kOC * kC, 6), values(kOC, 7)};
  for (std::size_t first = 0; first < kWindows; first += per_call) {
    const std::size_t windows = std::min(per_call, kWindows - first), rows = first * kT;
    backend->matmul_forward(m.out.data() + rows * kOC, in.data() + rows * kC, w.data(), bias.data(), windows * kT, kT,
                            kC, kOC, kOC);
    backend->matmul_backward(m.din.data() + rows * kC, m.dw.data(), m.dbias.data(), dout.data() + rows * kOC,
                             in.data() + rows * kC, w.data(), windows * kT, kT, kC, kOC, kOC);
  }
  omp_set_num_threads(saved);
  return m;
}

// The backend's promise (BackendGuarantees): at a given thread count, a window's terms do not depend on the other
// windows of the call. Across thread counts the weight gradient's row blocks differ, and a library may then sum in
// another order (oneDNN does, at 3 and 4 threads here): the same values to fp32 rounding, not the same bits.
TEST(CpuMatmulTiles, EveryGroupingOfWindowsGivesTheSameBitsAtEachThreadCount) {
  std::vector<std::string> libraries = cpu_gemm_names();
  for (const std::string& bf16 : cpu_gemm_bf16_names()) libraries.push_back(bf16);  // BF16 operands: the same
  for (const std::string& gemm : libraries) {
    const Matmuls one_thread = run(1, 1, gemm);
    for (int threads : {1, 2, 3, 4}) {
      const Matmuls reference = run(threads, 1, gemm);  // one window per call
      for (std::size_t per_call : {std::size_t(2), std::size_t(5)}) {
        SCOPED_TRACE(testing::Message() << gemm << ", " << threads << " threads, " << per_call
                                        << " windows per call");
        const Matmuls m = run(threads, per_call, gemm);
        EXPECT_EQ(m.out, reference.out);
        EXPECT_EQ(m.din, reference.din);
        EXPECT_EQ(m.dw, reference.dw);
        EXPECT_EQ(m.dbias, reference.dbias);
      }
      // Against one thread: sums of at most 35 products of magnitude ≤ 1 added in another order.
      for (std::size_t i = 0; i < reference.dw.size(); ++i)
        ASSERT_NEAR(reference.dw[i], one_thread.dw[i], 35 * 2 * 6e-8 * 35) << gemm << " " << threads << " dw " << i;
      EXPECT_EQ(reference.out, one_thread.out) << gemm << ": a window's forward product is one call at any count";
    }
  }
}

TEST(CpuMatmulTiles, TheProductIsTheMatrixProductWithEveryLibrary) {
  // Guards the tiles' offsets: one output, one input gradient and one weight gradient element against double.
  for (const std::string& gemm : cpu_gemm_names()) {
    SCOPED_TRACE(gemm);
    const Matmuls m = run(3, 2, gemm);
    const std::size_t N = kWindows * kT;
    const auto in = values(N * kC, 1), w = values(kOC * kC, 2), bias = values(kOC, 3), dout = values(N * kOC, 4);
    const std::size_t r = 23, o = 61, c = 37;
    double out = bias[o], din = 0.0, dw = values(kOC * kC, 6)[o * kC + c];
    for (std::size_t k = 0; k < kC; ++k) out += double(in[r * kC + k]) * w[o * kC + k];
    for (std::size_t k = 0; k < kOC; ++k) din += double(dout[r * kOC + k]) * w[k * kC + c];
    for (std::size_t n = 0; n < N; ++n) dw += double(dout[n * kOC + o]) * in[n * kC + c];
    // fp32 sums of ≤ 72 terms of magnitude ≤ 1 (dw: 35 terms plus its start): within 72 · 2⁻²⁴ · 72 of double.
    EXPECT_NEAR(m.out[r * kOC + o], out, 72 * 72 * 6e-8);
    EXPECT_NEAR(m.din[r * kC + c], din, 72 * 72 * 6e-8);
    EXPECT_NEAR(m.dw[o * kC + c], dw, 72 * 72 * 6e-8);
  }
}

TEST(CpuGemm, UnknownOrMissingLibrariesAndBadMixesAreRefusedWithOneLine) {
  EXPECT_EQ(cpu_gemm_unavailable("openblas"), "");
  EXPECT_EQ(cpu_gemm_unavailable("nt=openblas,nn=openblas,tn=openblas"), "");
  std::vector<std::string> names = {"by-cpu", "auto"};
  for (const std::string& name : cpu_gemm_names()) names.push_back(name);
  for (const std::string& name : cpu_gemm_bf16_names()) names.push_back(name);
  const std::string accepted =
      fmt::format("{} or {}", fmt::join(names.begin(), names.end() - 1, ", "), names.back());  // "…, onednn or …"
  const std::string per_kind = ", or one per kind of product: nt=LIB,nn=LIB,tn=LIB)";
  EXPECT_EQ(cpu_gemm_unavailable("mkl"), "--cpu-gemm: unknown library 'mkl' (expected " + accepted + per_kind);
  // One kind's library is a library: not by-cpu or auto, which choose libraries.
  const std::string one_kind =
      names.size() == 3 ? names.back() + ")"
                        : fmt::format("{} or {})", fmt::join(names.begin() + 2, names.end() - 1, ", "), names.back());
  for (const char* library : {"mkl", "auto", "by-cpu"})
    EXPECT_EQ(cpu_gemm_unavailable(fmt::format("nt=openblas,nn={},tn=openblas", library)),
              fmt::format("--cpu-gemm: unknown library '{}' for nn (expected {}", library, one_kind));
  for (const char* mix : {"nt=openblas,nn=openblas", "nt=openblas,nn=openblas,tn=openblas,nt=openblas",
                          "nt=openblas,nn=openblas,tt=openblas", "nt=openblas,nn,tn=openblas", "nt=openblas,,"})
    EXPECT_EQ(cpu_gemm_unavailable(mix), fmt::format("--cpu-gemm '{}': name a library for each kind of product once, "
                                                     "as nt=LIB,nn=LIB,tn=LIB",
                                                     mix))
        << mix;
  EXPECT_THROW(make_cpu_gemm("mkl"), UserError);
  EXPECT_EQ(make_cpu_gemm("openblas").name, "openblas");
  // A mix of one library is that library; the order of the kinds does not matter.
  EXPECT_EQ(make_cpu_gemm("tn=openblas,nt=openblas,nn=openblas").name, "openblas");
}

// A mix sends each kind of call to its library: the forward (nt) gives the bits of the library named for nt, the
// input gradient (nn) and the weight gradient (tn) those of theirs.
TEST(CpuGemm, EachKindOfProductGoesToTheLibraryTheMixNames) {
  const std::vector<std::string> names = cpu_gemm_names();
  std::map<std::string, Matmuls> alone;  // each library for every kind
  for (const std::string& name : names) alone[name] = run(2, kWindows, name);
  for (const std::string& nt : names)
    for (const std::string& nn : names)
      for (const std::string& tn : names) {
        const std::string mix = fmt::format("tn={},nn={},nt={}", tn, nn, nt);
        SCOPED_TRACE(mix);
        EXPECT_EQ(make_cpu_gemm(mix).libraries, (std::array<std::string, 3>{nt, nn, tn}));
        const Matmuls mixed = run(2, kWindows, mix);
        EXPECT_EQ(mixed.out, alone[nt].out);
        EXPECT_EQ(mixed.din, alone[nn].din);
        EXPECT_EQ(mixed.dw, alone[tn].dw);
      }
}

}  // namespace
}  // namespace dptrain
