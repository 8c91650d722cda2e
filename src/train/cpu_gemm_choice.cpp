#include "dptrain/train/cpu_gemm_choice.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "dptrain/compute/cpu_gemm.hpp"
#include "dptrain/core/error.hpp"

namespace dptrain {

namespace {
constexpr int kRounds = 3;      // timed rounds per library and kind, after one warm-up
constexpr int kMaxRows = 128;   // a window's rows, capped: the choice costs tens of ms even at Q = 1024
constexpr int kMaxWindows = 8;  // windows per product and thread, as many as fit kProbeBytes
constexpr std::size_t kProbeBytes = 16u << 20;  // the probe's activations per thread
}  // namespace

std::string CpuGemmChoice::description() const {
  if (requested == "by-cpu") return fmt::format("by-cpu → {} ({})", library, reason);
  if (requested != "auto") return library;
  std::vector<std::string> names, figures;
  for (const auto& [name, rates] : gflops) names.push_back(name);
  for (GemmCase c : kGemmCases) {
    std::vector<std::string> rates;
    for (const auto& [name, rate] : gflops) rates.push_back(fmt::format("{:.1f}", rate[std::size_t(c)]));
    figures.push_back(fmt::format("{} {}", gemm_case_name(c), fmt::join(rates, "/")));
  }
  return fmt::format("auto → {}: {} GFLOP/s ({}) on a block's products", library, fmt::join(figures, ", "),
                     fmt::join(names, "/"));
}

nlohmann::json CpuGemmChoice::summary() const {
  nlohmann::json out = {{"requested", requested}, {"library", library}};
  if (requested == "by-cpu") out["reason"] = reason;
  if (requested == "auto") {
    nlohmann::json rates = nlohmann::json::object();
    for (const auto& [name, rate] : gflops)
      for (GemmCase c : kGemmCases) rates[name][std::string(gemm_case_name(c))] = rate[std::size_t(c)];
    out["gflops"] = rates;
  }
  return out;
}

CpuGemmChoice fastest_cpu_gemm(const std::vector<std::string>& names,
                               const std::vector<std::array<double, 3>>& seconds,
                               const std::array<double, 3>& flops) {
  DP_ASSERT(!names.empty() && names.size() == seconds.size());
  CpuGemmChoice choice{.requested = "auto"};
  std::array<std::string, 3> libraries;
  for (std::size_t c = 0; c < 3; ++c) {
    std::size_t best = 0;  // the first of equal ones
    for (std::size_t i = 1; i < names.size(); ++i)
      if (seconds[i][c] < seconds[best][c]) best = i;
    libraries[c] = names[best];
  }
  choice.library = cpu_gemm_spec(libraries);
  for (std::size_t i = 0; i < names.size(); ++i) {
    std::array<double, 3> rates{};
    for (std::size_t c = 0; c < 3; ++c) rates[c] = flops[c] / seconds[i][c] / 1e9;
    choice.gflops.emplace_back(names[i], rates);
  }
  return choice;
}

int probe_windows(const std::vector<GemmProduct>& products) {
  return int(std::clamp<std::size_t>(kProbeBytes / probe_window_bytes(products), 1, kMaxWindows));
}

CpuGemmChoice cpu_gemm_for_cpu(const CpuInfo& cpu) {
  const auto& extensions = cpu.vector_extensions;
  const bool avx512 = std::find(extensions.begin(), extensions.end(), "avx512f") != extensions.end();
  const std::vector<std::string> names = cpu_gemm_names();
  const bool onednn = std::find(names.begin(), names.end(), "onednn") != names.end();
  return {.requested = "by-cpu",
          .library = avx512 && onednn ? "onednn" : "openblas",
          .reason = avx512 ? (onednn ? "AVX-512" : "AVX-512, but built without oneDNN") : "no AVX-512"};
}

std::string initial_cpu_gemm(std::string_view requested, const CpuInfo& cpu) {
  if (requested == "by-cpu") return cpu_gemm_for_cpu(cpu).library;
  return requested == "auto" ? "openblas" : std::string(requested);
}

CpuGemmChoice choose_cpu_gemm(std::string_view requested, const ModelConfig& model, int threads,
                              const MaxOverRanks& max_over_ranks, const CpuInfo& cpu) {
  if (requested == "by-cpu") return cpu_gemm_for_cpu(cpu);
  if (requested != "auto") return {.requested = std::string(requested), .library = make_cpu_gemm(requested).name};
  const std::vector<std::string> names = cpu_gemm_names();
  const std::vector<GemmProduct> products = block_products(std::min(model.seq, kMaxRows), model.width, threads);
  const int windows = probe_windows(products);
  std::array<std::vector<GemmProduct>, 3> by_case;
  std::array<double, 3> flops{};
  for (const GemmProduct& p : products) {
    by_case[std::size_t(p.gemm_case())].push_back(p);
    flops[std::size_t(p.gemm_case())] += p.flops() * windows * threads;
  }
  std::vector<double> mine;  // library-major: [library][case]
  for (const std::string& name : names)
    for (GemmCase c : kGemmCases)
      mine.push_back(time_products(make_cpu_gemm(name), by_case[std::size_t(c)], threads, windows, kRounds));
  const std::vector<double> slowest = max_over_ranks(mine);
  std::vector<std::array<double, 3>> seconds(names.size());
  for (std::size_t i = 0; i < names.size(); ++i)
    for (std::size_t c = 0; c < 3; ++c) seconds[i][c] = slowest[3 * i + c];
  return fastest_cpu_gemm(names, seconds, flops);
}

}  // namespace dptrain
