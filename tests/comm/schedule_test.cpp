// Schedules without MPI: all p ranks of a collective simulated in one process, round by round, on host buffers of
// floats. The simulation is the Schedule contract of schedule.hpp: every send of round i is matched, in order, by
// a receive of the same count on its peer in round i; sends read the state after the earlier rounds. Checked for
// ring and tree, every operation, p = 1…7 and counts 0, 1, < p, not divisible by p and large: exact results
// (integer values, exact in fp32), the round contract, the wire bytes, the scratch size, and the ring's BF16
// order of addition against its specification (ring_order.hpp).
#include "dptrain/comm/schedule.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "dptrain/comm/chunks.hpp"
#include "dptrain/core/bf16.hpp"
#include "expected_bytes.hpp"
#include "ring_order.hpp"

namespace dptrain {
namespace {

// What the contract of one round requires of one rank's schedule, and the scratch it declares.
void check_round_contract(const Schedule& schedule, std::size_t count, int size) {
  std::size_t scratch = 0;
  for (const Round& round : schedule.rounds) {
    std::size_t reduced = 0;
    for (const Send& send : round.sends) {
      EXPECT_GT(send.range.count, 0u);
      EXPECT_LE(send.range.end(), count);
      EXPECT_TRUE(send.peer >= 0 && send.peer < size);
      for (const Receive& receive : round.receives) EXPECT_FALSE(send.range.overlaps(receive.range));
    }
    for (std::size_t a = 0; a < round.receives.size(); ++a) {
      const Receive& receive = round.receives[a];
      EXPECT_GT(receive.range.count, 0u);
      EXPECT_LE(receive.range.end(), count);
      if (receive.reduce) reduced += receive.range.count;
      for (std::size_t b = 0; b < round.receives.size(); ++b) {
        if (a != b && !receive.reduce) {
          EXPECT_FALSE(receive.range.overlaps(round.receives[b].range));
        }
      }
    }
    scratch = std::max(scratch, reduced);
  }
  EXPECT_EQ(schedule.scratch_elements, scratch);
}

// Runs one schedule per rank on data[rank] (count elements each). bf16: every reduce rounds to BF16, as the
// host reduce-add does at each hop; otherwise plain fp32 adds.
void simulate(const std::vector<Schedule>& schedules, std::vector<std::vector<float>>& data, bool bf16) {
  const int p = static_cast<int>(schedules.size());
  for (const Schedule& schedule : schedules) ASSERT_EQ(schedule.rounds.size(), schedules[0].rounds.size());
  for (std::size_t i = 0; i < schedules[0].rounds.size(); ++i) {
    std::map<std::pair<int, int>, std::deque<std::vector<float>>> wires;  // (from, to) → messages in order
    for (int r = 0; r < p; ++r) {
      for (const Send& send : schedules[r].rounds[i].sends) {
        const auto first = data[r].begin() + static_cast<std::ptrdiff_t>(send.range.begin);
        wires[{r, send.peer}].emplace_back(first, first + static_cast<std::ptrdiff_t>(send.range.count));
      }
    }
    for (int r = 0; r < p; ++r) {
      for (const Receive& receive : schedules[r].rounds[i].receives) {
        auto& wire = wires[{receive.peer, r}];
        ASSERT_FALSE(wire.empty()) << "round " << i << ": rank " << r << " receives from " << receive.peer
                                   << " more than it sends";
        const std::vector<float> message = std::move(wire.front());
        wire.pop_front();
        ASSERT_EQ(message.size(), receive.range.count) << "round " << i << ", " << receive.peer << " → " << r;
        for (std::size_t k = 0; k < message.size(); ++k) {
          float& element = data[r][receive.range.begin + k];
          if (!receive.reduce) element = message[k];
          else element = bf16 ? round_to_bf16(element + message[k]) : element + message[k];
        }
      }
    }
    for (const auto& [pair, wire] : wires) {
      EXPECT_TRUE(wire.empty()) << "round " << i << ": " << wire.size() << " message(s) from " << pair.first
                                << " to " << pair.second << " never received";
    }
  }
}

// Every phase of (algorithm, op) on p ranks, also checking each rank's schedules against the contract and their
// wire elements against expected_bytes.hpp.
void run_collective(Algorithm algorithm, CollectiveOp op, int p, std::size_t count,
                    std::vector<std::vector<float>>& data, bool bf16 = false) {
  std::vector<std::vector<Schedule>> phases;  // [phase][rank]
  for (int r = 0; r < p; ++r) {
    std::vector<Schedule> own = collective_schedules(algorithm, op, r, p, count);
    phases.resize(own.size());
    std::uint64_t sent = 0;
    for (std::size_t phase = 0; phase < own.size(); ++phase) {
      check_round_contract(own[phase], count, p);
      sent += own[phase].elements_sent();
      phases[phase].push_back(std::move(own[phase]));
    }
    EXPECT_EQ(sent * 4, expected_bytes_sent(algorithm, op, count, DType::f32, r, p)) << "rank " << r;
  }
  for (const auto& per_rank : phases) simulate(per_rank, data, bf16);
}

// Integers below 2^24 in every partial sum: exact in fp32 in any order.
float integer_value(int rank, std::size_t i) { return static_cast<float>((rank * 131 + i * 7) % 1000); }

int owner_of(std::size_t i, std::size_t count, int p) {
  int q = 0;
  while (chunk_begin(count, p, q + 1) <= i) ++q;
  return q;
}

// Elements of rank r's defined result that differ from the exact answer.
long wrong_elements(CollectiveOp op, const std::vector<float>& result, int r, int p) {
  const std::size_t count = result.size();
  long wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const int owner = owner_of(i, count, p);
    if (op == CollectiveOp::reduce_scatter && owner != r) continue;  // only chunk r is defined
    float expected = 0;
    if (op == CollectiveOp::all_gather) {
      expected = integer_value(owner, i);
    } else {
      for (int q = 0; q < p; ++q) expected += integer_value(q, i);
    }
    wrong += result[i] != expected;
  }
  return wrong;
}

TEST(CommSchedule, EveryRankGetsTheExactResult) {
  for (Algorithm algorithm : {Algorithm::ring, Algorithm::tree}) {
    for (CollectiveOp op : {CollectiveOp::all_reduce, CollectiveOp::reduce_scatter, CollectiveOp::all_gather}) {
      for (int p = 1; p <= 7; ++p) {
        const std::set<std::size_t> counts{0, 1, 2, std::size_t(p - 1), std::size_t(p), std::size_t(p + 1),
                                           std::size_t(2 * p + 3), 1000, 100003};
        for (std::size_t count : counts) {
          SCOPED_TRACE(::testing::Message() << algorithm_name(algorithm) << " " << collective_op_name(op) << " p "
                                            << p << " count " << count);
          std::vector<std::vector<float>> data(p, std::vector<float>(count));
          for (int r = 0; r < p; ++r) {
            for (std::size_t i = 0; i < count; ++i) {
              // All-gather: only the own chunk is valid on entry; the rest must be overwritten.
              const bool valid = op != CollectiveOp::all_gather || owner_of(i, count, p) == r;
              data[r][i] = valid ? integer_value(r, i) : -1.0f;
            }
          }
          run_collective(algorithm, op, p, count, data);
          for (int r = 0; r < p; ++r) EXPECT_EQ(wrong_elements(op, data[r], r, p), 0) << "rank " << r;
        }
      }
    }
  }
}

// The ring schedules add in exactly the order of the specification (ring_order.hpp), BF16 rounding at each hop.
TEST(CommSchedule, RingAddsInTheSpecifiedOrder) {
  for (int p = 1; p <= 7; ++p) {
    for (CollectiveOp op : {CollectiveOp::reduce_scatter, CollectiveOp::all_reduce}) {
      const std::size_t count = 997;
      std::vector<std::vector<float>> data(p, std::vector<float>(count));
      for (int r = 0; r < p; ++r) {
        for (std::size_t i = 0; i < count; ++i) data[r][i] = mixed_value(r, i, DType::bf16);
      }
      run_collective(Algorithm::ring, op, p, count, data, /*bf16=*/true);
      long wrong = 0, order_matters = 0;
      for (int r = 0; r < p; ++r) {
        for (std::size_t i = 0; i < count; ++i) {
          const int c = owner_of(i, count, p);
          if (op == CollectiveOp::reduce_scatter && c != r) continue;
          const auto value = [&](int q) { return mixed_value(q, i, DType::bf16); };
          const float expected = ring_order_sum(p, c, DType::bf16, value);
          wrong += std::bit_cast<std::uint32_t>(data[r][i]) != std::bit_cast<std::uint32_t>(expected);
          // The same sum from rank 0 upwards: differs somewhere once p ≥ 3, so the check above has teeth.
          float ascending = value(0);
          for (int q = 1; q < p; ++q) ascending = round_to_bf16(ascending + value(q));
          order_matters += ascending != expected;
        }
      }
      EXPECT_EQ(wrong, 0) << "p " << p << " " << collective_op_name(op);
      if (p >= 3) {
        EXPECT_GT(order_matters, 0) << "p " << p;
      }
    }
  }
}

// One schedule spelled out: count 10 on 4 ranks (chunks 3 3 2 2), rank 0.
TEST(CommSchedule, RingReduceScatterRoundsForRankZero) {
  const Schedule schedule = ring_reduce_scatter_schedule(0, 4, 10);
  ASSERT_EQ(schedule.rounds.size(), 3u);
  const std::size_t sent_chunk[] = {3, 2, 1}, received_chunk[] = {2, 1, 0};  // r−s−1 and r−s−2
  for (std::size_t s = 0; s < 3; ++s) {
    const Round& round = schedule.rounds[s];
    ASSERT_EQ(round.sends.size(), 1u);
    ASSERT_EQ(round.receives.size(), 1u);
    EXPECT_EQ(round.sends[0].peer, 1);
    EXPECT_EQ(round.sends[0].range.begin, chunk_begin(10, 4, int(sent_chunk[s])));
    EXPECT_EQ(round.sends[0].range.count, chunk_size(10, 4, int(sent_chunk[s])));
    EXPECT_EQ(round.receives[0].peer, 3);
    EXPECT_EQ(round.receives[0].range.begin, chunk_begin(10, 4, int(received_chunk[s])));
    EXPECT_EQ(round.receives[0].range.count, chunk_size(10, 4, int(received_chunk[s])));
    EXPECT_TRUE(round.receives[0].reduce);
  }
  EXPECT_EQ(schedule.scratch_elements, 3u);  // the largest chunk received in one round
  EXPECT_EQ(schedule.elements_sent(), 7u);
  // Count < p: the empty chunks are left out, the rounds stay.
  const Schedule sparse = ring_all_gather_schedule(0, 4, 2);
  ASSERT_EQ(sparse.rounds.size(), 3u);
  EXPECT_EQ(sparse.elements_sent(), 1u);  // its own chunk [0, 1) only; chunks 3 and 2 are empty
}

// p = 6, rank 2 (depth 1 of a tree of depth 2, one child, rank 5): four rounds, up then down.
TEST(CommSchedule, TreeAllReduceRoundsForAnInnerRank) {
  const Schedule schedule = tree_all_reduce_schedule(2, 6, 100);
  ASSERT_EQ(schedule.rounds.size(), 4u);
  ASSERT_EQ(schedule.rounds[0].receives.size(), 1u);  // from its child, added in
  EXPECT_EQ(schedule.rounds[0].receives[0].peer, 5);
  EXPECT_TRUE(schedule.rounds[0].receives[0].reduce);
  ASSERT_EQ(schedule.rounds[1].sends.size(), 1u);  // the subtree sum to the root
  EXPECT_EQ(schedule.rounds[1].sends[0].peer, 0);
  ASSERT_EQ(schedule.rounds[2].receives.size(), 1u);  // the total from the root, in place
  EXPECT_FALSE(schedule.rounds[2].receives[0].reduce);
  ASSERT_EQ(schedule.rounds[3].sends.size(), 1u);  // and on to the child
  EXPECT_EQ(schedule.rounds[3].sends[0].peer, 5);
  EXPECT_EQ(schedule.scratch_elements, 100u);
  // The root adds two children's vectors in one round: scratch for both.
  EXPECT_EQ(tree_all_reduce_schedule(0, 6, 100).scratch_elements, 200u);
  EXPECT_TRUE(tree_all_reduce_schedule(0, 1, 100).rounds.empty());
}

}  // namespace
}  // namespace dptrain
