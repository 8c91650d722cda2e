// The run's link and device as the systems model sees them: α and β from a preset, a link.json file, an
// explicit `alpha=..,bw=..`, or a short calibration sweep at start-up; the per-rank peak FLOP/s from a flag or
// And the modelled time of every collective call the run issued.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "dptrain/comm/collectives.hpp"
#include "dptrain/cost/link.hpp"

namespace dptrain {

struct LinkSource {
  cost::Link link;
  std::string description;  // e.g. "calibrated: α = 12.3 µs, B = 4.1 GB/s (24 samples, 1.2 s)"
};

// `spec` is a preset name, a path to link.json ({"alpha_s": .., "bandwidth_Bps": ..}) or `alpha=..,bw=..`.
LinkSource link_from_spec(const std::string& spec);

// Throws UserError where the model's time of an all-reduce of `bytes` (ring or tree, on `ranks` ranks, at least
// 2: the link is the user's whatever the job's size), times `sums` (what the run's reports add up: milliseconds,
// calls per step, steps), leaves the range of a double, as dpmodel refuses such a link: values valid alone
// (α = 1e308 s) would print inf.
void require_finite_model_times(const LinkSource& source, int ranks, double bytes, double sums);

// Collective over all ranks: times all-reduces of a doubling sweep of sizes (up to max_bytes) with the run's
// collectives, on a buffer in `memory` (the one the collectives work on), for at most `budget_seconds`, then fits α
// and β by least squares. Every rank gets the same link. Each size's collectives run inside `watched` (a name for
// them, the exchange), which puts them under the run's deadline.
using WatchedExchange = std::function<void(const std::string& what, const std::function<void()>& exchange)>;
LinkSource calibrate_link(Collectives& collectives, Memory& memory, std::size_t max_bytes, double budget_seconds,
                          const WatchedExchange& watched);

// The α–β time of one recorded call on p ranks.
double modelled_seconds(const CommRecord& call, int ranks, const cost::Link& link);

}  // namespace dptrain
