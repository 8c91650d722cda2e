// GroupedExecutor::plan, without MPI: the properties a grouped transport relies on that the deferred-reduce test
// (grouped_executor_mpi_test.cpp) cannot reach with the ring's and tree's own schedules.
#include <gtest/gtest.h>

#include <map>
#include <tuple>
#include <vector>

#include "dptrain/comm/grouped_executor.hpp"
#include "dptrain/comm/schedule.hpp"

namespace dptrain {
namespace {

// A send and its receive must land in the same step (schedule, round, piece) on both ranks, with the same count:
// every rank issues its groups in that order, so a group can then only wait for groups of the same step elsewhere
// (no cycle), and NCCL matches a send with a receive of the same size. (Step indices may differ between ranks: a
// round has as many steps as its longest message has pieces.) Checked for every op, rank count and pieces of 3 and
// 1000.
TEST(CommGroupedPlan, EverySendMeetsItsReceiveInTheSameStepWithTheSameCount) {
  for (Algorithm algo : {Algorithm::ring, Algorithm::tree}) {
    for (CollectiveOp op : {CollectiveOp::all_reduce, CollectiveOp::reduce_scatter, CollectiveOp::all_gather}) {
      for (int p = 2; p <= 7; ++p) {
        for (std::size_t piece : {std::size_t{3}, std::size_t{1000}}) {
          const std::size_t count = 1000 * std::size_t(p) + 11;
          // (from, to) → the (schedule, round, piece, count) of each message between them, in posting order.
          using Message = std::tuple<std::size_t, std::size_t, std::size_t, std::size_t>;
          std::map<std::pair<int, int>, std::vector<Message>> sent, received;
          for (int r = 0; r < p; ++r) {
            const std::vector<Schedule> schedules = collective_schedules(algo, op, r, p, count);
            for (std::size_t k = 0; k < schedules.size(); ++k) {  // the ring all-reduce has two
              for (const auto& step : GroupedExecutor::plan(schedules[k], piece).steps) {
                for (const Send& send : step.sends)
                  sent[{r, send.peer}].push_back({k, step.round, step.piece, send.range.count});
                for (const auto& receive : step.receives)
                  received[{receive.peer, r}].push_back({k, step.round, step.piece, receive.range.count});
              }
            }
          }
          EXPECT_EQ(sent, received) << algorithm_name(algo) << " " << collective_op_name(op) << " p " << p
                                    << " pieces of " << piece;
        }
      }
    }
  }
}

// A plain receive into a range an earlier step's reduce wrote waits for that reduce (the ring and the tree always
// send such a range first, which waits already; a schedule need not).
TEST(CommGroupedPlan, PlainReceiveAfterAReduceOfItsRangeWaitsForIt) {
  Schedule schedule;
  schedule.add_round().receives.push_back({1, {0, 8}, true});
  schedule.add_round().receives.push_back({1, {4, 8}, false});
  schedule.finish();
  const GroupedExecutor::Plan plan = GroupedExecutor::plan(schedule, 100);
  ASSERT_EQ(plan.steps.size(), 2u);
  EXPECT_EQ(plan.steps[0].after_reduces, 0u);
  EXPECT_TRUE(plan.steps[0].has_reduce);
  EXPECT_EQ(plan.steps[1].after_reduces, 1u);  // the reduces of step 0
  EXPECT_FALSE(plan.steps[1].has_reduce);
}

// A node of the tree adds both children's vectors in one round: two reduce receives in one step, each a whole
// message, so two slots of the whole message (no more: a slot is never reused), and none on a leaf.
TEST(CommGroupedPlan, TreeNodeWithTwoChildrenHasTwoReducesPerStep) {
  const std::size_t count = 1001;
  const Schedule schedule = tree_all_reduce_schedule(/*rank=*/0, /*size=*/3, count);
  const GroupedExecutor::Plan plan = GroupedExecutor::plan(schedule, SIZE_MAX / 2);
  EXPECT_EQ(plan.slots, 2u);
  EXPECT_EQ(GroupedExecutor::plan(tree_all_reduce_schedule(/*rank=*/2, /*size=*/3, count), SIZE_MAX / 2).slots, 0u);
  EXPECT_EQ(plan.slot_elements, count);
  std::size_t reducing_steps = 0;
  for (const auto& step : plan.steps) {
    std::size_t reduces = 0;
    for (const auto& receive : step.receives) reduces += receive.reduce;
    if (reduces == 0) continue;
    ++reducing_steps;
    EXPECT_EQ(reduces, 2u);
  }
  EXPECT_EQ(reducing_steps, 1u);
}

// The scratch a tree node holds, for every rank count up to 9: at most two whole messages (its two children's),
// however many rounds the tree has; the ring keeps kSlotsPerReduce pieces once it has that many reduce receives.
TEST(CommGroupedPlan, ScratchIsAtMostTwoMessagesOnTheTreeAndFourPiecesOnTheRing) {
  const std::size_t count = 4096;
  for (int p = 2; p <= 9; ++p) {
    for (int r = 0; r < p; ++r) {
      for (CollectiveOp op : {CollectiveOp::all_reduce, CollectiveOp::reduce_scatter}) {
        for (const Schedule& s : collective_schedules(Algorithm::tree, op, r, p, count)) {
          const GroupedExecutor::Plan plan = GroupedExecutor::plan(s, SIZE_MAX / 2);
          EXPECT_LE(plan.slots * plan.slot_elements, 2 * count) << "tree p " << p << " rank " << r;
        }
        const Schedule ring = collective_schedules(Algorithm::ring, op, r, p, count)[0];
        const GroupedExecutor::Plan plan = GroupedExecutor::plan(ring, 16);
        EXPECT_EQ(plan.slots, GroupedExecutor::kSlotsPerReduce) << "ring p " << p << " rank " << r;
        EXPECT_EQ(plan.slot_elements, 16u);
      }
    }
  }
}

}  // namespace
}  // namespace dptrain
