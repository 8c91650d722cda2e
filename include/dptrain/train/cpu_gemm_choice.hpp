// --cpu-gemm auto: the sgemm library that runs this model's products fastest here, the same on every rank.
//
// Each library the build has (compute/cpu_gemm.hpp) times one transformer block's products for one window
// (block_products, time_products) on the rank's threads, all ranks at once; each library's time is the slowest
// rank's, so every rank sees the same times and keeps the same library: the one with the lowest (the first of
// cpu_gemm_names() where equal). The libraries do not give the same bits and timings vary from run to run, so two
// auto runs may choose differently: the start-up line and the summary name the choice, and naming it repeats a
// run bit for bit. A named library is used as given, untimed.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dptrain/model/config.hpp"

namespace dptrain {

struct CpuGemmChoice {
  std::string requested;                               // "auto" or a library's name
  std::string library;                                 // the one used
  std::vector<std::pair<std::string, double>> gflops;  // auto: each library's GFLOP/s (the slowest rank's)

  // "openblas", or "auto → openblas: openblas 81.2, onednn 75.3 GFLOP/s on a block's products".
  std::string description() const;
  // {"requested", "library"} and for auto "gflops": {library: GFLOP/s}.
  nlohmann::json summary() const;
};

// Each rank's values → their element-wise maximum over the ranks (MpiWorld::max_over_ranks).
using MaxOverRanks = std::function<std::vector<double>(std::vector<double>)>;

// UserError where `requested` is neither "auto" nor a library of this build.
CpuGemmChoice choose_cpu_gemm(std::string_view requested, const ModelConfig& model, int threads,
                              const MaxOverRanks& max_over_ranks);

// The choice among `names` given each one's seconds (the slowest rank's): the lowest, the first where equal.
CpuGemmChoice fastest_cpu_gemm(const std::vector<std::string>& names, const std::vector<double>& seconds,
                               double flops);

}  // namespace dptrain
