// --cpu-gemm: a named library is used untimed; auto times every library of the build on one block's products,
// takes each library's slowest-rank time and keeps the lowest (the first where equal).
#include "dptrain/train/cpu_gemm_choice.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "dptrain/compute/cpu_gemm.hpp"
#include "dptrain/core/error.hpp"

namespace dptrain {
namespace {

ModelConfig tiny_model() { return {.vocab = 64, .seq = 16, .layers = 2, .width = 32, .heads = 2}; }

TEST(CpuGemmChoice, TheLowestTimeWinsAndTheFirstWhereEqual) {
  const std::vector<std::string> names = {"openblas", "onednn"};
  CpuGemmChoice choice = fastest_cpu_gemm(names, {2.0, 0.5}, 4e9);
  EXPECT_EQ(choice.library, "onednn");
  ASSERT_EQ(choice.gflops.size(), 2u);
  EXPECT_EQ(choice.gflops[0], (std::pair<std::string, double>{"openblas", 2.0}));
  EXPECT_EQ(choice.gflops[1], (std::pair<std::string, double>{"onednn", 8.0}));
  EXPECT_EQ(choice.description(), "auto → onednn: openblas 2.0, onednn 8.0 GFLOP/s on a block's products");
  EXPECT_EQ(choice.summary(),
            (nlohmann::json{
                {"requested", "auto"}, {"library", "onednn"}, {"gflops", {{"openblas", 2.0}, {"onednn", 8.0}}}}));
  EXPECT_EQ(fastest_cpu_gemm(names, {1.0, 1.0}, 1e9).library, "openblas");
}

TEST(CpuGemmChoice, ANamedLibraryIsUsedAsGivenWithoutTimingOrExchange) {
  for (const std::string& name : cpu_gemm_names()) {
    int exchanges = 0;
    const CpuGemmChoice choice = choose_cpu_gemm(name, tiny_model(), 2, [&](std::vector<double> v) {
      ++exchanges;
      return v;
    });
    EXPECT_EQ(choice.library, name);
    EXPECT_EQ(choice.description(), name);
    EXPECT_EQ(choice.summary(), (nlohmann::json{{"requested", name}, {"library", name}}));
    EXPECT_EQ(exchanges, 0);
  }
  EXPECT_THROW(choose_cpu_gemm("mkl", tiny_model(), 1, [](std::vector<double> v) { return v; }), UserError);
}

// The exchange stands in for the other ranks: whatever it returns (the slowest rank's times) decides, so every
// rank, which receives the same values, keeps the same library.
TEST(CpuGemmChoice, AutoTimesEveryLibraryOnceAndTheSlowestRanksTimesDecide) {
  const std::vector<std::string> names = cpu_gemm_names();
  for (std::size_t slowest_elsewhere = 0; slowest_elsewhere < names.size(); ++slowest_elsewhere) {
    std::vector<double> mine;
    const CpuGemmChoice choice = choose_cpu_gemm("auto", tiny_model(), 2, [&](std::vector<double> v) {
      mine = v;
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = i == slowest_elsewhere ? 1.0 : 2.0;  // seconds
      return v;
    });
    ASSERT_EQ(mine.size(), names.size());
    for (double seconds : mine) EXPECT_TRUE(std::isfinite(seconds) && seconds > 0.0);
    EXPECT_EQ(choice.requested, "auto");
    EXPECT_EQ(choice.library, names[slowest_elsewhere]);
    // GFLOP/s from the exchanged times: a block's products at rows = seq = 16, C = 32, on each of 2 threads.
    double flops = 0.0;
    for (const GemmProduct& p : block_products(16, 32, 2)) flops += 2.0 * p.flops();
    ASSERT_EQ(choice.gflops.size(), names.size());
    EXPECT_DOUBLE_EQ(choice.gflops[slowest_elsewhere].second, flops / 1.0 / 1e9);
  }
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
}

}  // namespace
}  // namespace dptrain
