// Splitting each collective's measured time into skew and transfer from every rank's entry times.
#include "dptrain/comm/collective_skew.hpp"

#include <algorithm>

#include "dptrain/core/error.hpp"

namespace dptrain {

std::vector<double> entry_times(std::span<const CommRecord> calls) {
  std::vector<double> entries;
  entries.reserve(calls.size());
  for (const CommRecord& call : calls) entries.push_back(call.entry_s);
  return entries;
}

void split_skew(std::span<CommRecord> calls, std::span<const double> all_entries, int ranks) {
  require(ranks >= 1 && all_entries.size() == calls.size() * std::size_t(ranks),
          "split_skew: {} entry times for {} calls on {} ranks; every rank must issue the same collectives",
          all_entries.size(), calls.size(), ranks);
  for (std::size_t i = 0; i < calls.size(); ++i) {
    double last_entry = calls[i].entry_s;
    for (int r = 0; r < ranks; ++r) last_entry = std::max(last_entry, all_entries[std::size_t(r) * calls.size() + i]);
    CommRecord& call = calls[i];
    call.skew_s = std::clamp(last_entry - call.entry_s, 0.0, call.seconds);
    call.transfer_s = call.seconds - call.skew_s;
  }
}

}  // namespace dptrain
