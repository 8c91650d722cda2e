// --cpu-gemm by-cpu (the default): the sgemm library for this CPU's vector extensions, the same run after run:
// oneDNN where the CPU has AVX-512 and the build has oneDNN (its kernels use AVX-512 whatever OpenBLAS is pinned
// to: 2x OpenBLAS's Haswell kernels in training, docs/cpu-speed.md), OpenBLAS otherwise (the faster one on an
// AVX2 CPU). Hosts of a job with different CPUs may resolve it differently: the trainer refuses that.
//
// --cpu-gemm auto: for each kind of product (nt, nn, tn: compute/cpu_gemm.hpp) the sgemm library that runs this
// model's products of that kind fastest here, the same on every rank.
//
// Each library the build has times one transformer block's products for one window (block_products,
// time_products), kind by kind, on the rank's threads, all ranks at once; each time is the slowest rank's, so
// every rank sees the same times and keeps the same libraries: per kind the one with the lowest time (the first of
// cpu_gemm_names() where equal). The libraries do not give the same bits and timings vary from run to run, so two
// auto runs may choose differently: the start-up line and the summary name the choice as a --cpu-gemm value, and
// passing it repeats a run bit for bit. A named library or mix is used as given, untimed.
#pragma once
#include <array>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dptrain/compute/cpu_gemm.hpp"
#include "dptrain/core/cpu_info.hpp"
#include "dptrain/model/config.hpp"

namespace dptrain {

struct CpuGemmChoice {
  std::string requested{};  // "by-cpu", "auto", a library or a mix
  std::string library{};    // what is used, as a --cpu-gemm value (cpu_gemm_spec)
  std::string reason{};     // by-cpu: "AVX-512" or "no AVX-512"
  // auto: each library's GFLOP/s on each kind of product (in kGemmCases order), the slowest rank's.
  std::vector<std::pair<std::string, std::array<double, 3>>> gflops{};

  // "openblas", "by-cpu → onednn (AVX-512)", or "auto → nt=onednn,nn=openblas,tn=openblas: nt 99.1/146.2, nn
  // 107.4/124.9, tn 123.8/101.4 GFLOP/s (openblas/onednn) on a block's products".
  std::string description() const;
  // {"requested", "library"}, for by-cpu "reason", for auto "gflops": {library: {"nt", "nn", "tn": GFLOP/s}}.
  nlohmann::json summary() const;
};

// Each rank's values → their element-wise maximum over the ranks (MpiWorld::max_over_ranks).
using MaxOverRanks = std::function<std::vector<double>(std::vector<double>)>;

// How many windows auto times each product for: 8, fewer where their activations would exceed 16 MiB per thread.
int probe_windows(const std::vector<GemmProduct>& products);

// by-cpu's library on `cpu`, untimed.
CpuGemmChoice cpu_gemm_for_cpu(const CpuInfo& cpu);
// What the backend multiplies with before the ranks meet: by-cpu resolved, OpenBLAS for auto (until timed), else
// `requested` as given.
std::string initial_cpu_gemm(std::string_view requested, const CpuInfo& cpu);

// UserError where `requested` is neither "by-cpu", "auto" nor a library or mix of this build's libraries.
CpuGemmChoice choose_cpu_gemm(std::string_view requested, const ModelConfig& model, int threads,
                              const MaxOverRanks& max_over_ranks, const CpuInfo& cpu);

// The choice among `names` given each one's seconds on each kind of product (the slowest rank's) and each kind's
// FLOPs: per kind the lowest, the first where equal.
CpuGemmChoice fastest_cpu_gemm(const std::vector<std::string>& names,
                               const std::vector<std::array<double, 3>>& seconds, const std::array<double, 3>& flops);

}  // namespace dptrain
