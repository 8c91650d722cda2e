// Splitting the flat buffer into padded units.
#include "dptrain/dp/unit_plan.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "dptrain/core/error.hpp"

namespace dptrain {

FlatRange Unit::owned(int rank) const {
  const std::size_t begin = std::min(range.begin + std::size_t(rank) * slice, range.end);
  const std::size_t end = std::min(begin + slice, range.end);
  return {begin, std::max(begin, end)};
}

UnitPlan::UnitPlan(const ParameterLayout& layout, std::size_t bucket_bytes, std::size_t element_bytes, int world)
    : world_(world) {
  DP_ASSERT(world >= 1 && element_bytes > 0);
  const int layers = layout.config().layers;
  auto add = [&](std::string name, FlatRange range) {
    Unit u;
    u.name = std::move(name);
    u.range = range;
    const std::size_t granule = std::size_t(world) * kSliceAlignment;
    u.padded = (range.size() + granule - 1) / granule * granule;
    u.slice = u.padded / std::size_t(world);
    u.padded_offset = padded_total_;
    u.shard_offset = shard_total_;
    padded_total_ += u.padded;
    shard_total_ += u.slice;
    units_.push_back(std::move(u));
  };
  add("final norm", layout.final_norm());
  // Blocks from the last: a bucket grows downwards while it fits.
  for (int top = layers - 1; top >= 0;) {
    int bottom = top;
    std::size_t bytes = layout.block_range(top).size() * element_bytes;
    while (bucket_bytes > 0 && bottom > 0 &&
           bytes + layout.block_range(bottom - 1).size() * element_bytes <= bucket_bytes) {
      --bottom;
      bytes += layout.block_range(bottom).size() * element_bytes;
    }
    add(bottom == top ? fmt::format("block {}", top) : fmt::format("blocks {}-{}", top, bottom),
        {layout.block_range(bottom).begin, layout.block_range(top).end});
    top = bottom - 1;
  }
  add("embeddings", layout.embeddings());
}

std::size_t UnitPlan::unit_of(std::size_t offset) const {
  for (std::size_t u = 0; u < units_.size(); ++u)
    if (offset >= units_[u].range.begin && offset < units_[u].range.end) return u;
  DP_ASSERT(false && "offset outside the flat buffer");
  return 0;
}

std::size_t UnitPlan::largest_padded() const {
  std::size_t largest = 0;
  for (const Unit& u : units_) largest = std::max(largest, u.padded);
  return largest;
}

}  // namespace dptrain
