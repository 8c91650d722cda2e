// The balanced chunk partition and the ring's wire-byte formula.
#include "dptrain/comm/chunks.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "dptrain/comm/collectives.hpp"

namespace dptrain {
namespace {

std::vector<std::size_t> begins(std::size_t count, int parts) {
  std::vector<std::size_t> result;
  for (int r = 0; r <= parts; ++r) result.push_back(chunk_begin(count, parts, r));
  return result;
}

TEST(CommChunks, BalancedRule) {
  EXPECT_EQ(begins(12, 4), (std::vector<std::size_t>{0, 3, 6, 9, 12}));
  EXPECT_EQ(begins(10, 4), (std::vector<std::size_t>{0, 3, 6, 8, 10}));  // the first 10 mod 4 = 2 get one more
  EXPECT_EQ(begins(2, 4), (std::vector<std::size_t>{0, 1, 2, 2, 2}));    // count < p: empty chunks at the end
  EXPECT_EQ(begins(0, 3), (std::vector<std::size_t>{0, 0, 0, 0}));
  EXPECT_EQ(begins(7, 1), (std::vector<std::size_t>{0, 7}));
  EXPECT_EQ(chunk_size(1000003, 6, 0), 166668u);
  EXPECT_EQ(chunk_size(1000003, 6, 5), 166667u);
}

TEST(CommChunks, SizesDifferByAtMostOneAndCoverTheBuffer) {
  for (std::size_t count : {0, 1, 5, 6, 7, 1000003}) {
    for (int p = 1; p <= 9; ++p) {
      std::size_t total = 0;
      for (int r = 0; r < p; ++r) {
        total += chunk_size(count, p, r);
        EXPECT_LE(chunk_size(count, p, 0) - chunk_size(count, p, r), 1u);
      }
      EXPECT_EQ(total, count);
    }
  }
}

TEST(CommRingBytes, TwoTimesPMinusOneOverPWhenPDividesCount) {
  // M = 4096 elements · 2 B; p = 4: 2·3/4·M = 12288 bytes per rank, half in each phase.
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(ring_bytes_sent(CollectiveOp::all_reduce, 4096, DType::bf16, r, 4), 12288u);
    EXPECT_EQ(ring_bytes_sent(CollectiveOp::reduce_scatter, 4096, DType::bf16, r, 4), 6144u);
    EXPECT_EQ(ring_bytes_sent(CollectiveOp::all_gather, 4096, DType::f32, r, 4), 12288u);
  }
  EXPECT_EQ(ring_bytes_sent(CollectiveOp::all_reduce, 100, DType::f32, 0, 1), 0u);
}

TEST(CommRingBytes, UnequalChunksSendExactlyTheChunksSent) {
  // count 10, p 4: chunks 3 3 2 2. Rank r sends every chunk but r (reduce-scatter) and every chunk but r+1
  // (all-gather).
  EXPECT_EQ(ring_bytes_sent(CollectiveOp::reduce_scatter, 10, DType::f32, 0, 4), 7u * 4);
  EXPECT_EQ(ring_bytes_sent(CollectiveOp::all_gather, 10, DType::f32, 0, 4), 7u * 4);
  EXPECT_EQ(ring_bytes_sent(CollectiveOp::all_gather, 10, DType::f32, 1, 4), 8u * 4);
  EXPECT_EQ(ring_bytes_sent(CollectiveOp::all_reduce, 10, DType::bf16, 3, 4), (8u + 7u) * 2);
}

}  // namespace
}  // namespace dptrain
