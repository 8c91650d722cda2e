#include "dptrain/train/cpu_gemm_choice.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "dptrain/compute/cpu_gemm.hpp"
#include "dptrain/core/error.hpp"

namespace dptrain {

namespace {
constexpr int kRounds = 3;     // timed rounds per library, after one warm-up
constexpr int kMaxRows = 128;  // a window's rows, capped: the choice costs tens of ms even at Q = 1024
}  // namespace

std::string CpuGemmChoice::description() const {
  if (requested != "auto") return library;
  std::vector<std::string> figures;
  for (const auto& [name, rate] : gflops) figures.push_back(fmt::format("{} {:.1f}", name, rate));
  return fmt::format("auto → {}: {} GFLOP/s on a block's products", library, fmt::join(figures, ", "));
}

nlohmann::json CpuGemmChoice::summary() const {
  nlohmann::json out = {{"requested", requested}, {"library", library}};
  if (requested == "auto") {
    nlohmann::json rates = nlohmann::json::object();
    for (const auto& [name, rate] : gflops) rates[name] = rate;
    out["gflops"] = rates;
  }
  return out;
}

CpuGemmChoice fastest_cpu_gemm(const std::vector<std::string>& names, const std::vector<double>& seconds,
                               double flops) {
  DP_ASSERT(!names.empty() && names.size() == seconds.size());
  CpuGemmChoice choice{.requested = "auto"};
  const auto fastest = std::min_element(seconds.begin(), seconds.end());  // the first of equal ones
  choice.library = names[std::size_t(fastest - seconds.begin())];
  for (std::size_t i = 0; i < names.size(); ++i) choice.gflops.emplace_back(names[i], flops / seconds[i] / 1e9);
  return choice;
}

CpuGemmChoice choose_cpu_gemm(std::string_view requested, const ModelConfig& model, int threads,
                              const MaxOverRanks& max_over_ranks) {
  if (requested != "auto") return {.requested = std::string(requested), .library = make_cpu_gemm(requested).name};
  const std::vector<std::string> names = cpu_gemm_names();
  const std::vector<GemmProduct> products = block_products(std::min(model.seq, kMaxRows), model.width, threads);
  std::vector<double> seconds;
  for (const std::string& name : names)
    seconds.push_back(time_products(make_cpu_gemm(name), products, threads, kRounds));
  double flops = 0.0;
  for (const GemmProduct& p : products) flops += p.flops() * threads;
  return fastest_cpu_gemm(names, max_over_ranks(seconds), flops);
}

}  // namespace dptrain
