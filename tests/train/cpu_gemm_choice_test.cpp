// --cpu-gemm: by-cpu follows the CPU's vector extensions; a named library is used untimed; auto times every library of the build on one block's products,
// takes each library's slowest-rank time and keeps the lowest (the first where equal).
#include "dptrain/train/cpu_gemm_choice.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "dptrain/compute/cpu_gemm.hpp"
#include "dptrain/core/error.hpp"

namespace dptrain {
namespace {

ModelConfig tiny_model() { return {.vocab = 64, .seq = 16, .layers = 2, .width = 32, .heads = 2}; }

const CpuInfo kAvx2Cpu{.model = "AVX2 CPU", .vector_extensions = {"avx", "avx2", "fma"}};
const CpuInfo kAvx512Cpu{.model = "AVX-512 CPU", .vector_extensions = {"avx", "avx2", "fma", "avx512f", "avx512bw"}};

bool built_with_onednn() {
  const std::vector<std::string> names = cpu_gemm_names();
  return std::find(names.begin(), names.end(), "onednn") != names.end();
}

TEST(CpuGemmChoice, ByCpuIsOneDnnWhereTheCpuHasAvx512AndOpenBlasElsewhere) {
  const CpuGemmChoice avx2 = cpu_gemm_for_cpu(kAvx2Cpu);
  EXPECT_EQ(avx2.library, "openblas");
  EXPECT_EQ(avx2.description(), "by-cpu → openblas (no AVX-512)");
  EXPECT_EQ(avx2.summary(),
            (nlohmann::json{{"requested", "by-cpu"}, {"library", "openblas"}, {"reason", "no AVX-512"}}));
  const CpuGemmChoice avx512 = cpu_gemm_for_cpu(kAvx512Cpu);
  if (built_with_onednn()) {
    EXPECT_EQ(avx512.description(), "by-cpu → onednn (AVX-512)");
  } else {
    EXPECT_EQ(avx512.description(), "by-cpu → openblas (AVX-512, but built without oneDNN)");
  }
  // Untimed, and what the backend starts with; auto starts with OpenBLAS until timed, a library as named.
  const auto no_exchange = [](std::vector<double>) -> std::vector<double> {
    ADD_FAILURE() << "by-cpu exchanged timings";
    return {};
  };
  EXPECT_EQ(choose_cpu_gemm("by-cpu", tiny_model(), 2, no_exchange, kAvx512Cpu).library, avx512.library);
  EXPECT_EQ(initial_cpu_gemm("by-cpu", kAvx512Cpu), avx512.library);
  EXPECT_EQ(initial_cpu_gemm("by-cpu", kAvx2Cpu), "openblas");
  EXPECT_EQ(initial_cpu_gemm("auto", kAvx512Cpu), "openblas");
  EXPECT_EQ(initial_cpu_gemm("nt=openblas,nn=openblas,tn=openblas", kAvx512Cpu), "nt=openblas,nn=openblas,tn=openblas");
}

TEST(CpuGemmChoice, PerKindTheLowestTimeWinsAndTheFirstWhereEqual) {
  const std::vector<std::string> names = {"openblas", "onednn"};
  // seconds [library][nt, nn, tn]; FLOPs per kind 4e9, 2e9, 1e9.
  const CpuGemmChoice mixed = fastest_cpu_gemm(names, {{2.0, 1.0, 1.0}, {0.5, 2.0, 1.0}}, {4e9, 2e9, 1e9});
  EXPECT_EQ(mixed.library, "nt=onednn,nn=openblas,tn=openblas");
  ASSERT_EQ(mixed.gflops.size(), 2u);
  EXPECT_EQ(mixed.gflops[0], (std::pair<std::string, std::array<double, 3>>{"openblas", {2.0, 2.0, 1.0}}));
  EXPECT_EQ(mixed.gflops[1], (std::pair<std::string, std::array<double, 3>>{"onednn", {8.0, 1.0, 1.0}}));
  EXPECT_EQ(mixed.description(),
            "auto → nt=onednn,nn=openblas,tn=openblas: nt 2.0/8.0, nn 2.0/1.0, tn 1.0/1.0 GFLOP/s (openblas/onednn) "
            "on a block's products");
  EXPECT_EQ(mixed.summary(), (nlohmann::json{{"requested", "auto"},
                                             {"library", "nt=onednn,nn=openblas,tn=openblas"},
                                             {"gflops",
                                              {{"openblas", {{"nt", 2.0}, {"nn", 2.0}, {"tn", 1.0}}},
                                               {"onednn", {{"nt", 8.0}, {"nn", 1.0}, {"tn", 1.0}}}}}}));
  // One library fastest at every kind is named alone.
  EXPECT_EQ(fastest_cpu_gemm(names, {{1.0, 1.0, 1.0}, {2.0, 1.5, 1.0}}, {1e9, 1e9, 1e9}).library, "openblas");
  EXPECT_EQ(fastest_cpu_gemm(names, {{2.0, 2.0, 2.0}, {1.0, 1.0, 1.0}}, {1e9, 1e9, 1e9}).library, "onednn");
}

TEST(CpuGemmChoice, ANamedLibraryIsUsedAsGivenWithoutTimingOrExchange) {
  for (const std::string& name : cpu_gemm_names()) {
    int exchanges = 0;
    const CpuGemmChoice choice = choose_cpu_gemm(
        name, tiny_model(), 2,
        [&](std::vector<double> v) {
          ++exchanges;
          return v;
        },
        kAvx512Cpu);
    EXPECT_EQ(choice.library, name);
    EXPECT_EQ(choice.description(), name);
    EXPECT_EQ(choice.summary(), (nlohmann::json{{"requested", name}, {"library", name}}));
    EXPECT_EQ(exchanges, 0);
  }
  EXPECT_THROW(choose_cpu_gemm("mkl", tiny_model(), 1, [](std::vector<double> v) { return v; }, kAvx2Cpu), UserError);
}

// The exchange stands in for the other ranks: whatever it returns (the slowest rank's times) decides, so every
// rank, which receives the same values, keeps the same libraries.
TEST(CpuGemmChoice, AutoTimesEveryLibraryOnEveryKindAndTheSlowestRanksTimesDecide) {
  const std::vector<std::string> names = cpu_gemm_names();
  for (std::size_t fastest = 0; fastest < names.size(); ++fastest) {
    std::vector<double> mine;
    const CpuGemmChoice choice = choose_cpu_gemm(
        "auto", tiny_model(), 2,
        [&](std::vector<double> v) {
          mine = v;
          // [library][nt, nn, tn]: `fastest` wins at nt and nn, the first library at tn (ties go to the first).
          for (std::size_t i = 0; i < v.size(); ++i)
            v[i] = (i / 3 == fastest && i % 3 < 2) || i % 3 == 2 ? 1.0 : 2.0;
          return v;
        },
        kAvx2Cpu);
    ASSERT_EQ(mine.size(), 3 * names.size());
    for (double seconds : mine) EXPECT_TRUE(std::isfinite(seconds) && seconds > 0.0);
    EXPECT_EQ(choice.requested, "auto");
    EXPECT_EQ(choice.library, cpu_gemm_spec({names[fastest], names[fastest], names[0]}));
    // GFLOP/s from the exchanged times: each kind's products at rows = seq = 16, C = 32, for 8 windows (their
    // operands are far below 32 MiB) on each of 2 threads.
    const std::vector<GemmProduct> products = block_products(16, 32, 2);
    ASSERT_EQ(probe_windows(products), 8);
    std::array<double, 3> flops{};
    for (const GemmProduct& p : products) flops[std::size_t(p.gemm_case())] += 8 * 2.0 * p.flops();
    ASSERT_EQ(choice.gflops.size(), names.size());
    for (std::size_t c = 0; c < 3; ++c) EXPECT_DOUBLE_EQ(choice.gflops[fastest].second[c], flops[c] / 1.0 / 1e9) << c;
    // The choice is a --cpu-gemm value that names the same libraries.
    EXPECT_EQ(make_cpu_gemm(choice.library).libraries,
              (std::array<std::string, 3>{names[fastest], names[fastest], names[0]}));
  }
}

// Per thread and window the probe holds a product's activations: A and C of the forward and input-gradient
// products (128 rows × (C + 4C) for fc and fc projection), A and B of the weight gradient (at 2 threads
// 128 × (4C/2 + C) or 128 × (C/2 + 4C), less): 640·C floats. The weights are shared, the weight-gradient block is
// one per thread.
TEST(CpuGemmChoice, TheProbeHoldsAtMost16MiBOfActivationsPerThread) {
  EXPECT_EQ(probe_window_bytes(block_products(128, 256, 2)), 640u * 256 * 4);
  EXPECT_EQ(probe_windows(block_products(128, 256, 2)), 8);    // 640 KiB a window: 8 windows, the most
  EXPECT_EQ(probe_windows(block_products(128, 1024, 2)), 6);   // 2.5 MiB a window
  EXPECT_EQ(probe_windows(block_products(128, 4096, 1)), 1);   // 10 MiB a window
  EXPECT_EQ(probe_windows(block_products(128, 16384, 1)), 1);  // 40 MiB: still one
}

TEST(CpuGemmChoice, BlockProductsAreTheBackendsCallsForOneWindow) {
  // rows 4, C 8, 2 threads: forward, input gradient, weight gradient (half the rows per thread) of the qkv [24,8],
  // attention projection [8,8], fc [32,8] and fc projection [8,32] weights.
  const std::vector<GemmProduct> products = block_products(4, 8, 2);
  const std::vector<std::tuple<bool, bool, int, int, int>> expected = {
      {false, true, 4, 24, 8}, {false, false, 4, 8, 24}, {true, false, 12, 8, 4},  {false, true, 4, 8, 8},
      {false, false, 4, 8, 8}, {true, false, 4, 8, 4},   {false, true, 4, 32, 8},  {false, false, 4, 8, 32},
      {true, false, 16, 8, 4}, {false, true, 4, 8, 32},  {false, false, 4, 32, 8}, {true, false, 4, 32, 4}};
  ASSERT_EQ(products.size(), expected.size());
  for (std::size_t i = 0; i < products.size(); ++i) {
    const GemmProduct& p = products[i];
    EXPECT_EQ(std::make_tuple(p.trans_a, p.trans_b, p.m, p.n, p.k), expected[i]) << "product " << i;
  }
  EXPECT_EQ(products[0].flops(), 2.0 * 4 * 24 * 8);
  EXPECT_EQ(products[0].gemm_case(), GemmCase::nt);
  EXPECT_EQ(products[1].gemm_case(), GemmCase::nn);
  EXPECT_EQ(products[2].gemm_case(), GemmCase::tn);
}

}  // namespace
}  // namespace dptrain
