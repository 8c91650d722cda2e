// A collective's schedules in words, for reading how it works (dpbench --schedule): every rank's receives round by
// round, what each rank sends, and what every element holds at the end as a sum of the ranks' inputs x0, x1, …,
// computed by walking the schedules symbolically (no communication).
#pragma once
#include <cstddef>
#include <string>

#include "dptrain/comm/algorithm.hpp"

namespace dptrain {

// The largest group and buffer schedule_text() writes out (its lines grow with both).
inline constexpr int kScheduleTextMaxRanks = 16;
inline constexpr std::size_t kScheduleTextMaxCount = 64;

// `algorithm` ring or tree, 1 ≤ size ≤ kScheduleTextMaxRanks, 1 ≤ count ≤ kScheduleTextMaxCount.
std::string schedule_text(Algorithm algorithm, CollectiveOp op, int size, std::size_t count);

}  // namespace dptrain
