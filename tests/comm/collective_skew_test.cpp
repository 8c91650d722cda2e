// Splitting measured collective times into skew and transfer, against hand-computed values.
#include <gtest/gtest.h>

#include "dptrain/comm/collective_skew.hpp"
#include "dptrain/core/error.hpp"

namespace dptrain {
namespace {

CommRecord entered(double entry, double exit) {
  return {.seconds = exit - entry, .entry_s = entry, .exit_s = exit, .transfer_s = exit - entry};
}

TEST(CommSkew, LastEntryDividesEachCall) {
  // Rank 1's view of three calls on 3 ranks. Call 0: rank 2 entered 4 s after rank 1, which then spent 1 s moving
  // data. Call 1: rank 1 entered last, so it waited for nobody. Call 2: rank 0 entered 0.5 s late.
  std::vector<CommRecord> calls = {entered(10, 15), entered(20, 21), entered(30, 32)};
  const std::vector<double> all = {11, 19, 30.5,   // rank 0
                                   10, 20, 30,     // rank 1 (this one)
                                   14, 19.5, 29};  // rank 2
  EXPECT_EQ(entry_times(calls), (std::vector<double>{10, 20, 30}));
  split_skew(calls, all, 3);
  EXPECT_DOUBLE_EQ(calls[0].skew_s, 4);
  EXPECT_DOUBLE_EQ(calls[0].transfer_s, 1);
  EXPECT_DOUBLE_EQ(calls[1].skew_s, 0);
  EXPECT_DOUBLE_EQ(calls[1].transfer_s, 1);
  EXPECT_DOUBLE_EQ(calls[2].skew_s, 0.5);
  EXPECT_DOUBLE_EQ(calls[2].transfer_s, 1.5);
  for (const CommRecord& call : calls) EXPECT_NEAR(call.skew_s + call.transfer_s, call.seconds, 1e-12);
}

TEST(CommSkew, ClockOffsetsCannotMakeATimeNegative) {
  // Another host's clock 3 s ahead: its entry seems to come after this rank's exit. The skew cannot exceed the
  // call's own time; the transfer cannot go below zero.
  std::vector<CommRecord> calls = {entered(10, 12)};
  split_skew(calls, std::vector<double>{10, 13}, 2);
  EXPECT_DOUBLE_EQ(calls[0].skew_s, 2);
  EXPECT_DOUBLE_EQ(calls[0].transfer_s, 0);
}

TEST(CommSkew, ARankWithOtherCallsIsRefused) {
  std::vector<CommRecord> calls = {entered(10, 12), entered(13, 14)};
  EXPECT_THROW(split_skew(calls, std::vector<double>{10, 13, 11}, 2), UserError);
}

}  // namespace
}  // namespace dptrain
