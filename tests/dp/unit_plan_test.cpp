// UnitPlan: the units cover the flat buffer exactly once, in launch order (final norm, blocks from the last, merged
// while they fit in the bucket, embeddings), each padded to a multiple of world × 32 elements, and the ranks' owned
// slices partition each unit's real elements. Exact counts by hand for the tiny and small configs; the invariants
// for every world size 1–5, bucket sizes from 0 to "everything in one unit", and both wire element sizes.
#include "dptrain/dp/unit_plan.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

namespace dptrain {
namespace {

ModelConfig tiny() { return {.vocab = 256, .seq = 16, .layers = 2, .width = 32, .heads = 2}; }     // configs/tiny.toml: N = 34,176
ModelConfig small() { return {.vocab = 256, .seq = 128, .layers = 4, .width = 256, .heads = 4}; }  // configs/small.toml: N = 3,257,856

constexpr std::size_t kMiB = std::size_t{1} << 20;

std::size_t mib(double x) { return std::size_t(x * double(kMiB)); }  // as the engine converts --bucket-mb

struct ExpectedUnit {
  std::string name;
  std::size_t begin, end, padded;
};

void expect_units(const UnitPlan& plan, const std::vector<ExpectedUnit>& expected) {
  ASSERT_EQ(plan.units().size(), expected.size());
  for (std::size_t u = 0; u < expected.size(); ++u) {
    SCOPED_TRACE("unit " + std::to_string(u));
    const Unit& unit = plan.units()[u];
    EXPECT_EQ(unit.name, expected[u].name);
    EXPECT_EQ(unit.range.begin, expected[u].begin);
    EXPECT_EQ(unit.range.end, expected[u].end);
    EXPECT_EQ(unit.padded, expected[u].padded);
    EXPECT_EQ(unit.slice, expected[u].padded / std::size_t(plan.world()));
  }
}

// Flat layout of tiny (forward order): embeddings [0, 8704) (wte 256·32 + wpe 16·32), block 0 [8704, 21408),
// block 1 [21408, 34112) (12·32² + 13·32 = 12,704 each), final norm [34112, 34176) (2·32).
TEST(UnitPlan, TinyAtThreeRanksOneUnitPerBlockByHand) {
  const ParameterLayout layout(tiny());
  ASSERT_EQ(layout.total(), 34176u);
  const UnitPlan plan(layout, 0, 2, 3);
  // Granule 3 × 32 = 96: 64 → 96, 12,704 → 133·96 = 12,768, 8,704 → 91·96 = 8,736.
  expect_units(plan, {{"final norm", 34112, 34176, 96},
                      {"block 1", 21408, 34112, 12768},
                      {"block 0", 8704, 21408, 12768},
                      {"embeddings", 0, 8704, 8736}});
  EXPECT_EQ(plan.world(), 3);
  EXPECT_EQ(plan.padded_total(), 34368u);
  EXPECT_EQ(plan.shard_total(), 11456u);  // 32 + 4256 + 4256 + 2912
  const std::vector<std::size_t> padded_offsets = {0, 96, 12864, 25632}, shard_offsets = {0, 32, 4288, 8544};
  for (std::size_t u = 0; u < 4; ++u) {
    EXPECT_EQ(plan.units()[u].padded_offset, padded_offsets[u]);
    EXPECT_EQ(plan.units()[u].shard_offset, shard_offsets[u]);
  }
  // The final norm's 64 elements: ranks 0 and 1 hold 32 each, rank 2's slice is all padding.
  const Unit& norm = plan.units()[0];
  EXPECT_EQ(norm.owned(0).begin, 34112u);
  EXPECT_EQ(norm.owned(0).end, 34144u);
  EXPECT_EQ(norm.owned(1).begin, 34144u);
  EXPECT_EQ(norm.owned(1).end, 34176u);
  EXPECT_EQ(norm.owned(2).size(), 0u);
  // Block 1: slices of 4,256; the last rank's holds the remaining 12,704 − 2·4,256 = 4,192 real elements.
  const Unit& block1 = plan.units()[1];
  EXPECT_EQ(block1.owned(0).begin, 21408u);
  EXPECT_EQ(block1.owned(0).end, 25664u);
  EXPECT_EQ(block1.owned(1).begin, 25664u);
  EXPECT_EQ(block1.owned(1).end, 29920u);
  EXPECT_EQ(block1.owned(2).begin, 29920u);
  EXPECT_EQ(block1.owned(2).end, 34112u);
  // Embeddings: slices of 2,912; rank 2 holds 8,704 − 2·2,912 = 2,880.
  const Unit& embeddings = plan.units()[3];
  EXPECT_EQ(embeddings.owned(2).begin, 5824u);
  EXPECT_EQ(embeddings.owned(2).end, 8704u);
}

TEST(UnitPlan, TinyDefaultBucketMergesBothBlocks) {
  const ParameterLayout layout(tiny());
  // 25 MiB holds both blocks (2 · 12,704 · 2 bytes). At 2 ranks (granule 64) every unit is already a multiple of
  // 64: 64, 25,408 = 397·64 and 8,704 = 136·64, so there is no padding at all.
  const UnitPlan two(layout, mib(25), 2, 2);
  expect_units(two, {{"final norm", 34112, 34176, 64}, {"blocks 1-0", 8704, 34112, 25408}, {"embeddings", 0, 8704, 8704}});
  EXPECT_EQ(two.padded_total(), layout.total());
  // At 5 ranks (granule 160): 64 → 160, 25,408 → 159·160 = 25,440, 8,704 → 55·160 = 8,800.
  const UnitPlan five(layout, mib(25), 4, 5);
  expect_units(five,
               {{"final norm", 34112, 34176, 160}, {"blocks 1-0", 8704, 34112, 25440}, {"embeddings", 0, 8704, 8800}});
  // The final norm's 64 elements are the first two 32-element slices; ranks 2–4 own nothing of it.
  EXPECT_EQ(five.units()[0].owned(1).end, 34176u);
  for (int r = 2; r < 5; ++r) EXPECT_EQ(five.units()[0].owned(r).size(), 0u) << r;
}

// small: embeddings 98,304 (256·256 + 128·256), blocks of 789,760 (12·256² + 13·256), final norm 512. A block's
// gradient is 1,579,520 bytes in BF16 and 3,159,040 in fp32.
TEST(UnitPlan, SmallMergesBlocksWhileTheyFitTheBucket) {
  const ParameterLayout layout(small());
  ASSERT_EQ(layout.total(), 3257856u);
  const std::size_t e = 98304, b = 789760, f = e + 4 * b;  // f: where the final norm starts
  // 3.1 MiB = 3,250,585 bytes: two BF16 blocks (3,159,040) fit, three do not. At 4 ranks (granule 128) every unit
  // is already a multiple of 128 elements.
  const UnitPlan bf16_plan(layout, mib(3.1), 2, 4);
  expect_units(bf16_plan, {{"final norm", f, f + 512, 512},
                           {"blocks 3-2", e + 2 * b, f, 2 * b},
                           {"blocks 1-0", e, e + 2 * b, 2 * b},
                           {"embeddings", 0, e, e}});
  EXPECT_EQ(bf16_plan.padded_total(), layout.total());
  EXPECT_EQ(bf16_plan.shard_total(), layout.total() / 4);
  // The same bucket in fp32 holds one block only.
  const UnitPlan fp32_plan(layout, mib(3.1), 4, 4);
  expect_units(fp32_plan, {{"final norm", f, f + 512, 512},
                           {"block 3", e + 3 * b, f, b},
                           {"block 2", e + 2 * b, e + 3 * b, b},
                           {"block 1", e + b, e + 2 * b, b},
                           {"block 0", e, e + b, b},
                           {"embeddings", 0, e, e}});
  // 5 MiB = 5,242,880 bytes: three BF16 blocks (4,738,560) fit; the bucket fills from the last block down, so the
  // first block is left alone.
  const UnitPlan five(layout, mib(5), 2, 1);
  expect_units(five, {{"final norm", f, f + 512, 512},
                      {"blocks 3-1", e + b, f, 3 * b},
                      {"block 0", e, e + b, b},
                      {"embeddings", 0, e, e}});
  // A bucket smaller than one block: one unit per block, as with 0.
  const UnitPlan one(layout, mib(1), 2, 1);
  ASSERT_EQ(one.units().size(), 6u);
  EXPECT_EQ(one.units()[1].name, "block 3");
}

// Every invariant of a plan, for any layout, bucket, element size and world.
void check_plan(const ParameterLayout& layout, std::size_t bucket_bytes, std::size_t element_bytes, int world) {
  SCOPED_TRACE("bucket " + std::to_string(bucket_bytes) + " B, element " + std::to_string(element_bytes) +
               " B, world " + std::to_string(world) + ", layers " + std::to_string(layout.config().layers));
  const UnitPlan plan(layout, bucket_bytes, element_bytes, world);
  const auto& units = plan.units();
  const int L = layout.config().layers;
  ASSERT_GE(units.size(), 3u);
  ASSERT_EQ(plan.world(), world);
  // Launch order: final norm, the blocks from the last down, embeddings; consecutive units are adjacent in the
  // flat buffer, descending, so together they cover [0, N) exactly once.
  EXPECT_EQ(units.front().name, "final norm");
  EXPECT_EQ(units.front().range.begin, layout.final_norm().begin);
  EXPECT_EQ(units.front().range.end, layout.total());
  EXPECT_EQ(units.back().name, "embeddings");
  EXPECT_EQ(units.back().range.begin, 0u);
  EXPECT_EQ(units.back().range.end, layout.embeddings().end);
  std::size_t covered = 0;
  for (std::size_t u = 0; u < units.size(); ++u) {
    covered += units[u].range.size();
    EXPECT_GT(units[u].range.size(), 0u);
    if (u + 1 < units.size()) {
      EXPECT_EQ(units[u + 1].range.end, units[u].range.begin) << u;
    }
  }
  EXPECT_EQ(covered, layout.total());
  // The blocks: unit 1 starts at the last block, each unit is whole consecutive blocks, named after them, and
  // the bucket rule holds: within the bucket unless a single block, and unable to take the next block down.
  int top = L - 1;
  for (std::size_t u = 1; u + 1 < units.size(); ++u) {
    const Unit& unit = units[u];
    ASSERT_GE(top, 0);
    int bottom = top;
    while (bottom >= 0 && layout.block_range(bottom).begin > unit.range.begin) --bottom;
    ASSERT_GE(bottom, 0) << unit.name;
    EXPECT_EQ(unit.range.end, layout.block_range(top).end) << unit.name;
    EXPECT_EQ(unit.range.begin, layout.block_range(bottom).begin) << unit.name;
    const std::string name = top == bottom ? "block " + std::to_string(top)
                                           : "blocks " + std::to_string(top) + "-" + std::to_string(bottom);
    EXPECT_EQ(unit.name, name);
    const std::size_t bytes = unit.range.size() * element_bytes;
    if (bucket_bytes == 0) {
      EXPECT_EQ(top, bottom) << unit.name;
    } else {
      if (top != bottom) {
        EXPECT_LE(bytes, bucket_bytes) << unit.name;
      }
      if (bottom > 0) {
        EXPECT_GT(bytes + layout.block_range(bottom - 1).size() * element_bytes, bucket_bytes) << unit.name;
      }
    }
    top = bottom - 1;
  }
  EXPECT_EQ(top, -1);  // every block is in some unit
  // Padding, offsets and the owned slices.
  const std::size_t granule = std::size_t(world) * kSliceAlignment;
  std::size_t padded_total = 0, shard_total = 0;
  for (const Unit& unit : units) {
    SCOPED_TRACE(unit.name);
    EXPECT_EQ(unit.padded % granule, 0u);
    EXPECT_GE(unit.padded, unit.range.size());
    EXPECT_LT(unit.padded - unit.range.size(), granule);
    EXPECT_EQ(unit.slice * std::size_t(world), unit.padded);
    EXPECT_EQ(unit.slice % kSliceAlignment, 0u);
    EXPECT_EQ(unit.padded_offset, padded_total);
    EXPECT_EQ(unit.shard_offset, shard_total);
    padded_total += unit.padded;
    shard_total += unit.slice;
    // Rank r's slice is [r·slice, (r+1)·slice) of the unit cut at its real end: the slices follow each other,
    // partition the real elements, and only those reaching into the padding are short (or empty).
    std::size_t at = unit.range.begin, owned_total = 0;
    for (int r = 0; r < world; ++r) {
      const FlatRange own = unit.owned(r);
      EXPECT_EQ(own.begin, at) << "rank " << r;
      EXPECT_LE(own.begin, own.end) << "rank " << r;
      EXPECT_LE(own.size(), unit.slice) << "rank " << r;
      const std::size_t start = unit.range.begin + std::size_t(r) * unit.slice;
      const std::size_t real = start >= unit.range.end ? 0 : std::min(unit.slice, unit.range.end - start);
      EXPECT_EQ(own.size(), real) << "rank " << r;
      at = own.end;
      owned_total += own.size();
    }
    EXPECT_EQ(at, unit.range.end);
    EXPECT_EQ(owned_total, unit.range.size());
  }
  EXPECT_EQ(plan.padded_total(), padded_total);
  EXPECT_EQ(plan.shard_total(), shard_total);
  EXPECT_EQ(plan.shard_total() * std::size_t(world), plan.padded_total());
  // unit_of agrees with the ranges at both ends of every unit.
  for (std::size_t u = 0; u < units.size(); ++u) {
    EXPECT_EQ(plan.unit_of(units[u].range.begin), u);
    EXPECT_EQ(plan.unit_of(units[u].range.end - 1), u);
  }
}

TEST(UnitPlan, InvariantsForEveryWorldAndBucket) {
  for (const ModelConfig& config : {tiny(), small(), ModelConfig{.vocab = 256, .seq = 16, .layers = 5, .width = 32, .heads = 2}, ModelConfig{.vocab = 11, .seq = 5, .layers = 3, .width = 8, .heads = 2}}) {
    const ParameterLayout layout(config);
    const std::size_t block = layout.block_range(0).size();
    for (std::size_t element_bytes : {std::size_t{2}, std::size_t{4}}) {
      const std::size_t b = block * element_bytes;  // one block's gradient in bytes
      for (std::size_t bucket : {std::size_t{0}, std::size_t{1}, mib(0.01), b - 1, b, b + 1, 2 * b, 2 * b + 1,
                                 3 * b, mib(25), std::numeric_limits<std::size_t>::max() / 2})
        for (int world = 1; world <= 5; ++world) check_plan(layout, bucket, element_bytes, world);
    }
  }
}

TEST(UnitPlan, BucketSizeDecidesTheNumberOfBlockUnits) {
  const ParameterLayout layout(ModelConfig{.vocab = 256, .seq = 16, .layers = 5, .width = 32, .heads = 2});  // tiny with 5 blocks
  const std::size_t b = layout.block_range(0).size() * 2;
  auto block_units = [&](std::size_t bucket) { return UnitPlan(layout, bucket, 2, 3).units().size() - 2; };
  EXPECT_EQ(block_units(0), 5u);
  EXPECT_EQ(block_units(b - 1), 5u);  // smaller than a block: each block alone
  EXPECT_EQ(block_units(b), 5u);
  EXPECT_EQ(block_units(2 * b), 3u);  // 4-3, 2-1, 0
  EXPECT_EQ(block_units(3 * b), 2u);  // 4-2, 1-0
  EXPECT_EQ(block_units(5 * b), 1u);
  EXPECT_EQ(block_units(std::numeric_limits<std::size_t>::max() / 2), 1u);
  const UnitPlan two(layout, 2 * b, 2, 1);
  EXPECT_EQ(two.units()[1].name, "blocks 4-3");
  EXPECT_EQ(two.units()[2].name, "blocks 2-1");
  EXPECT_EQ(two.units()[3].name, "block 0");
}

TEST(UnitPlan, UnitOfEveryElementOfTiny) {
  const ParameterLayout layout(tiny());
  for (int world : {1, 3, 4}) {
    const UnitPlan plan(layout, 0, 2, world);
    for (std::size_t i = 0; i < layout.total(); ++i) {
      const Unit& unit = plan.units()[plan.unit_of(i)];
      ASSERT_TRUE(i >= unit.range.begin && i < unit.range.end) << i;
    }
  }
}

}  // namespace
}  // namespace dptrain
