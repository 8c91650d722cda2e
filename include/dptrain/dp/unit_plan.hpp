// The units of the flat parameter buffer: the granule of gradient communication, overlap and ZeRO sharding.
// A unit is a contiguous range of the flat buffer: the final LayerNorm, one or more whole consecutive blocks
// (merged while they fit in the bucket size), or the embeddings. Units are listed in launch order, the order the
// backward pass completes them: final norm, blocks L−1 … 0, embeddings (the tied wte gets its last term there).
// Each unit is padded to a multiple of world × kSliceAlignment elements so it splits into `world` equal slices;
// rank r owns slice r of every unit. The padding is zero and never updated.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "dptrain/model/layout.hpp"

namespace dptrain {

// Slices hold a multiple of 32 elements: 64 bytes (a cache line) of BF16.
inline constexpr std::size_t kSliceAlignment = 32;

struct Unit {
  std::string name;               // "final norm", "blocks 3-0", "block 5", "embeddings"
  FlatRange range;                // its parameters in the flat buffer [N]
  std::size_t padded = 0;         // elements after padding: world · slice
  std::size_t slice = 0;          // elements per rank
  std::size_t padded_offset = 0;  // where the unit starts in a buffer of all padded units, in launch order
  std::size_t shard_offset = 0;   // where its slice starts in a rank's shard of all units: Σ earlier slices

  // Rank r's slice as a range of the flat buffer: the real elements of [r·slice, (r+1)·slice) of the unit
  // (shorter than the slice, or empty, where it reaches into the padding).
  FlatRange owned(int rank) const;
};

// --bucket-mb as the bytes UnitPlan takes.
inline std::size_t bucket_bytes(double bucket_mb) { return std::size_t(bucket_mb * double(std::size_t{1} << 20)); }

class UnitPlan {
 public:
  // bucket_bytes = 0: one unit per block. Otherwise consecutive blocks share a unit while its gradient, at
  // element_bytes per element, stays within bucket_bytes (a block larger than that is a unit of its own).
  UnitPlan(const ParameterLayout& layout, std::size_t bucket_bytes, std::size_t element_bytes, int world);

  const std::vector<Unit>& units() const { return units_; }  // launch order
  int world() const { return world_; }
  std::size_t padded_total() const { return padded_total_; }  // Σ padded: a full padded buffer
  std::size_t shard_total() const { return shard_total_; }    // Σ slice: one rank's shard
  std::size_t largest_padded() const;                         // the largest unit's padded elements

  // The unit holding flat element `offset`.
  std::size_t unit_of(std::size_t offset) const;

 private:
  std::vector<Unit> units_;
  int world_ = 1;
  std::size_t padded_total_ = 0, shard_total_ = 0;
};

}  // namespace dptrain
