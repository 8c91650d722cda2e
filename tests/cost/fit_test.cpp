// The α–β fit: exact recovery from noiseless synthetic sweeps, approximate recovery with noise, and refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "dptrain/core/error.hpp"
#include "dptrain/cost/fit.hpp"

namespace dptrain::cost {
namespace {

// A dpbench-like sweep: 1 KB to 1 GB in steps of 4×, every time from the docs/systems-model.md formula by hand.
std::vector<TimingSample> ring_sweep(int p, double alpha, double bandwidth) {
  std::vector<TimingSample> samples;
  for (double bytes = 1024; bytes <= 1.1e9; bytes *= 4) {
    const double seconds = 2 * (p - 1) * alpha + 2.0 * (p - 1) / p * bytes / bandwidth;
    samples.push_back({Collective::ring_all_reduce, p, bytes, seconds});
  }
  return samples;
}

void expect_relative_near(double actual, double expected, double tolerance) {
  EXPECT_LE(std::abs(actual - expected), tolerance * std::abs(expected)) << actual << " vs " << expected;
}

TEST(Fit, RecoversAlphaAndBandwidthExactlyWithoutNoise) {
  for (FitWeighting weighting : {FitWeighting::absolute, FitWeighting::relative}) {
    const LinkFit fit = fit_alpha_beta(ring_sweep(8, 5e-6, 450e9), weighting);
    expect_relative_near(fit.link.alpha_s, 5e-6, 1e-9);
    expect_relative_near(fit.link.bandwidth_Bps, 450e9, 1e-9);
    EXPECT_EQ(fit.samples, 11);
    EXPECT_LT(fit.max_relative_residual, 1e-12);
    EXPECT_FALSE(fit.alpha_clamped);
  }
}

TEST(Fit, RecoversFromMixedCollectivesAndRankCounts) {
  const double alpha = 10e-6, bandwidth = 50e9;  // ib-400g
  std::vector<TimingSample> samples;
  for (int p : {2, 4, 8, 64}) {
    for (double bytes : {4e3, 1e6, 256e6}) {
      samples.push_back({Collective::ring_all_reduce, p, bytes,
                         2 * (p - 1) * alpha + 2.0 * (p - 1) / p * bytes / bandwidth});
      samples.push_back({Collective::ring_all_gather, p, bytes, (p - 1) * alpha + (p - 1.0) / p * bytes / bandwidth});
      const int levels = static_cast<int>(std::ceil(std::log2(p)));
      samples.push_back({Collective::tree_all_reduce, p, bytes, 2 * levels * (alpha + bytes / bandwidth)});
      samples.push_back({Collective::piece_all_gather, p, bytes / p, (p - 1) * (alpha + bytes / p / bandwidth)});
    }
  }
  const LinkFit fit = fit_alpha_beta(samples);
  expect_relative_near(fit.link.alpha_s, alpha, 1e-9);
  expect_relative_near(fit.link.bandwidth_Bps, bandwidth, 1e-9);
}

// t = α·a + β·b + γ·c for every kind and two rank counts: the adds (c) of all-reduce and reduce-scatter next to
// an all-gather that adds nothing separate γ from β.
TEST(Fit, RecoversGammaFromCollectivesThatAddAndOneThatDoesNot) {
  const Link link{.alpha_s = 20e-6, .bandwidth_Bps = 50e6, .gamma_s_per_byte = 1 / 15e9};
  std::vector<TimingSample> samples;
  for (int p : {2, 3})
    for (Collective kind : {Collective::ring_all_reduce, Collective::ring_reduce_scatter, Collective::ring_all_gather})
      for (double bytes = 64e3; bytes <= 70e6; bytes *= 4)
        samples.push_back({kind, p, bytes, collective_terms(kind, p, bytes).seconds(link)});
  for (FitWeighting weighting : {FitWeighting::absolute, FitWeighting::relative}) {
    const LinkGammaFit fitted = fit_alpha_beta_gamma(samples, weighting);
    EXPECT_TRUE(fitted.gamma_fitted);
    expect_relative_near(fitted.fit.link.alpha_s, link.alpha_s, 1e-7);
    expect_relative_near(fitted.fit.link.bandwidth_Bps, link.bandwidth_Bps, 1e-7);
    expect_relative_near(fitted.fit.link.gamma_s_per_byte, link.gamma_s_per_byte, 1e-6);
    EXPECT_LT(fitted.fit.max_relative_residual, 1e-9);
  }
  // The α–β fit of the same sweep folds the adds into B: slower than the link.
  EXPECT_LT(fit_alpha_beta(samples).link.bandwidth_Bps, link.bandwidth_Bps);
}

TEST(Fit, GammaIsNotDeterminedByOneKindOfCollective) {
  // A ring all-reduce adds half of what it sends at every size: γ and β cannot be told apart; the α–β fit stands.
  const std::vector<TimingSample> samples = ring_sweep(4, 5e-6, 10e9);
  const LinkGammaFit fitted = fit_alpha_beta_gamma(samples);
  EXPECT_FALSE(fitted.gamma_fitted);
  EXPECT_EQ(fitted.fit.link, fit_alpha_beta(samples).link);
  EXPECT_EQ(fitted.fit.link.gamma_s_per_byte, 0.0);
}

// Multiplicative noise, uniform in ±2%, from a fixed seed (mt19937's output is fixed by the standard).
std::vector<TimingSample> noisy(std::vector<TimingSample> samples, std::uint32_t seed) {
  std::mt19937 generator(seed);
  for (TimingSample& sample : samples) {
    const double uniform = generator() / 4294967296.0;  // [0, 1)
    sample.seconds *= 1 + 0.04 * (uniform - 0.5);
  }
  return samples;
}

TEST(Fit, RecoversApproximatelyWithNoise) {
  for (std::uint32_t seed : {1u, 2u, 3u}) {
    const auto samples = noisy(ring_sweep(8, 5e-6, 450e9), seed);
    // Relative weighting: small messages pin α, large ones B; both within a few percent.
    const LinkFit relative = fit_alpha_beta(samples, FitWeighting::relative);
    expect_relative_near(relative.link.alpha_s, 5e-6, 0.05);
    expect_relative_near(relative.link.bandwidth_Bps, 450e9, 0.03);
    EXPECT_LE(relative.max_relative_residual, 0.05);
    EXPECT_GT(relative.rms_residual_s, 0);
    // Absolute least squares is dominated by the largest messages: B is still good.
    const LinkFit absolute = fit_alpha_beta(samples, FitWeighting::absolute);
    expect_relative_near(absolute.link.bandwidth_Bps, 450e9, 0.03);
  }
}

TEST(Fit, ClampsANegativeAlphaToZero) {
  std::vector<TimingSample> samples = ring_sweep(8, -1e-6, 450e9);  // times below the bandwidth line
  std::erase_if(samples, [](const TimingSample& s) { return s.seconds <= 0; });  // measured times are positive
  const LinkFit fit = fit_alpha_beta(samples);
  EXPECT_TRUE(fit.alpha_clamped);
  EXPECT_EQ(fit.link.alpha_s, 0);
  EXPECT_GT(fit.link.bandwidth_Bps, 0);
}

TEST(Fit, RefusesSamplesThatCannotDetermineALink) {
  const std::vector<TimingSample> one = {{Collective::ring_all_reduce, 8, 1e6, 1e-3}};
  EXPECT_THROW(fit_alpha_beta(one), UserError);
  const std::vector<TimingSample> one_size = {{Collective::ring_all_reduce, 8, 1e6, 1e-3},
                                              {Collective::ring_all_reduce, 8, 1e6, 1.1e-3}};
  EXPECT_THROW(fit_alpha_beta(one_size), UserError);
  const std::vector<TimingSample> single_rank = {{Collective::ring_all_reduce, 1, 1e3, 1e-3},
                                                 {Collective::ring_all_reduce, 1, 1e6, 2e-3}};
  EXPECT_THROW(fit_alpha_beta(single_rank), UserError);
  const std::vector<TimingSample> zero_time = {{Collective::ring_all_reduce, 8, 1e3, 0},
                                               {Collective::ring_all_reduce, 8, 1e6, 2e-3}};
  EXPECT_THROW(fit_alpha_beta(zero_time), UserError);
  const std::vector<TimingSample> shrinking = {{Collective::ring_all_reduce, 8, 1e3, 2e-3},
                                               {Collective::ring_all_reduce, 8, 1e9, 1e-3}};
  EXPECT_THROW(fit_alpha_beta(shrinking), UserError);
}

}  // namespace
}  // namespace dptrain::cost
