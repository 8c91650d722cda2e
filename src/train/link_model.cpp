// Link calibration, link files and the α–β time of recorded calls.
#include "dptrain/train/link_model.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "dptrain/core/error.hpp"
#include "dptrain/core/timer.hpp"
#include "dptrain/cost/fit.hpp"

namespace dptrain {

LinkSource link_from_spec(const std::string& spec) {
  std::error_code unreadable;  // a path that cannot be looked at is not a file here: "no file" below
  if (std::filesystem::is_regular_file(spec, unreadable)) {
    std::ifstream in(spec);
    try {
      const auto j = nlohmann::json::parse(in);
      // γ is optional: dpbench writes it only from a sweep that can determine it (--op all).
      const cost::Link link{j.at("alpha_s").get<double>(), j.at("bandwidth_Bps").get<double>(),
                            j.value("gamma_s_per_byte", 0.0)};
      require(link.alpha_s >= 0 && link.bandwidth_Bps > 0 && link.gamma_s_per_byte >= 0 &&
                  std::isfinite(link.alpha_s) && std::isfinite(link.bandwidth_Bps) &&
                  std::isfinite(link.gamma_s_per_byte),
              "--link: '{}' holds α {} s, B {} B/s and γ {} s/B; need finite α ≥ 0, B > 0 and γ ≥ 0", spec,
              link.alpha_s, link.bandwidth_Bps, link.gamma_s_per_byte);
      return {link, fmt::format("from {}: {}", spec, cost::describe(link))};
    } catch (const nlohmann::json::exception& e) {
      fail("--link: '{}' is not a link file ({{\"alpha_s\": .., \"bandwidth_Bps\": ..}}): {}", spec, e.what());
    }
  }
  // Not a file: a preset or a spec. A name that looks like a file is a file that is not there.
  const bool looks_like_a_file = spec.ends_with(".json") || spec.find('/') != std::string::npos;
  require(!looks_like_a_file || spec.find('=') != std::string::npos,
          "--link: no file '{}' (expected a link.json file as dpbench --fit writes, a preset such as nvlink-h100, or "
          "alpha=5us,bw=450GB/s)",
          spec);
  try {
    const cost::Link link = cost::parse_link(spec);
    return {link, fmt::format("{}: {}", spec, cost::describe(link))};
  } catch (const UserError& e) {
    fail("--link: {}", e.what());
  }
}

void require_finite_model_times(const LinkSource& source, int ranks, double bytes, double sums) {
  for (const cost::Collective kind : {cost::Collective::ring_all_reduce, cost::Collective::tree_all_reduce}) {
    const double seconds = cost::collective_cost(kind, std::max(2, ranks), bytes, source.link).seconds;
    require(std::isfinite(seconds * sums),
            "--link: the model's time of a {} of the {:.0f}-byte gradient is {:g} s with {}: too large for the "
            "run's sums of modelled times (in ms, over calls and steps) to stay finite; give values of a real link",
            cost::collective_name(kind), bytes, seconds, cost::describe(source.link));
  }
}

LinkSource calibrate_link(Collectives& collectives, Memory& memory, std::size_t max_bytes, double budget_seconds,
                          const WatchedExchange& watched) {
  const int p = collectives.size();
  if (p == 1) return {cost::Link{0, 1e30}, "single rank: no link"};
  const Stopwatch total;
  std::vector<cost::TimingSample> samples;
  // Sizes up to at least 4 MiB whatever the model: below that, latency and noise dominate and the bandwidth
  // term cannot be fitted.
  Buffer buffer(memory, std::max<std::size_t>(max_bytes, 4u << 20));
  memory.zero(buffer.data(), buffer.bytes());
  // The collectives may run on another stream than the zeroing (a GPU's comm stream): wait for it here (a download
  // returns after the work issued before it).
  std::byte first{};
  memory.download(&first, buffer.data(), 1);
  for (std::size_t bytes = 1 << 12; bytes <= buffer.bytes(); bytes *= 4) {
    const std::size_t count = bytes / 2;  // BF16 elements
    double slowest = 0, elapsed_max = 0;
    watched(fmt::format("the link calibration's all-reduces of {} KiB", bytes >> 10), [&] {
      collectives.all_reduce(buffer.data(), count, DType::bf16);  // warm-up
      double local = 0;
      const int iterations = 3;
      for (int i = 0; i < iterations; ++i) {
        const Stopwatch watch;
        collectives.all_reduce(buffer.data(), count, DType::bf16);
        local += watch.seconds() / iterations;
      }
      // The slowest rank sets the collective's time, and every rank must fit the same samples.
      double elapsed = total.seconds();
      MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      MPI_Allreduce(&elapsed, &elapsed_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    });
    samples.push_back({cost::Collective::ring_all_reduce, p, double(bytes), slowest});
    if (elapsed_max > budget_seconds / 2) break;  // the next size costs about four times as much
  }
  collectives.log().clear();
  const std::string sweep = fmt::format("{} all-reduces of 4 KiB–{} KiB, {:.0f} ms", samples.size(),
                                        std::size_t(samples.back().bytes) >> 10, 1e3 * total.seconds());
  try {
    const cost::LinkFit fit = cost::fit_alpha_beta(samples, cost::FitWeighting::relative);
    return {fit.link, fmt::format("calibrated: {} ({})", cost::describe(fit.link), sweep)};
  } catch (const UserError&) {
    // Timings too noisy for least squares (a busy, oversubscribed machine): bandwidth from the largest
    // message, latency from the smallest.
    const double factor = 2.0 * (p - 1) / p;
    const auto& small = samples.front();
    const auto& large = samples.back();
    cost::Link link{0, factor * large.bytes / large.seconds};
    link.alpha_s = std::max(0.0, (small.seconds - factor * small.bytes / link.bandwidth_Bps) / (2.0 * (p - 1)));
    return {link,
            fmt::format("calibrated (two-point; timings too noisy to fit): {} ({})", cost::describe(link), sweep)};
  }
}

double modelled_seconds(const CommRecord& call, int ranks, const cost::Link& link) {
  cost::Collective kind = cost::Collective::ring_all_reduce;
  switch (call.op) {
    case CollectiveOp::all_reduce:
      kind = call.algo == Algorithm::tree ? cost::Collective::tree_all_reduce : cost::Collective::ring_all_reduce;
      break;
    case CollectiveOp::reduce_scatter:
      kind = cost::Collective::ring_reduce_scatter;
      break;
    case CollectiveOp::all_gather:
      kind = cost::Collective::ring_all_gather;
      break;
  }
  return cost::collective_cost(kind, ranks, double(call.bytes), link).seconds;
}

}  // namespace dptrain
