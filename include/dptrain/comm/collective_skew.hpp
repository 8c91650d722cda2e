// Skew and transfer: a collective's wall time on one rank is the wait for the last rank to enter it (skew: a
// slower backward pass, a busy core, a stopped process) followed by the data movement itself (transfer), which is
// what the α–β model predicts. Every rank issues the same collectives in the same order, so call i is the same
// call everywhere; once the ranks have exchanged their entry times (one all-gather of one double per call), each
// rank splits its own measurements. Pure: the exchange is the caller's.
#pragma once
#include <span>
#include <vector>

#include "dptrain/comm/comm_log.hpp"

namespace dptrain {

// The entry times of `calls`, in order: what this rank contributes to the exchange.
std::vector<double> entry_times(std::span<const CommRecord> calls);

// all_entries: every rank's entry_times, rank after rank [ranks × calls.size()], on one clock. Sets each call's
// skew_s = (last rank's entry − this rank's entry), limited to [0, seconds], and transfer_s = seconds − skew_s,
// so skew_s + transfer_s == seconds (to rounding). The limits absorb clock offsets between hosts that an imperfect
// alignment leaves (a call cannot have waited longer than it took, nor less than nothing).
void split_skew(std::span<CommRecord> calls, std::span<const double> all_entries, int ranks);

}  // namespace dptrain
