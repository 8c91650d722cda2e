// GroupedExecutor under mpiexec, on streams that make every missing dependency visible (grouped_mpi_transport.hpp:
// reduces deferred as long as the executor allows): a missing dependency makes the result differ from the
// point-to-point executor's (the MPI transport's), which adds in the same order and so must agree bit for bit. Random
// BF16 and fp32 data, every op of ring and tree, counts with unequal chunks and pieces of a few elements (many steps
// per round, a short last piece).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <random>
#include <vector>

#include "dptrain/comm/chunks.hpp"
#include "dptrain/comm/grouped_executor.hpp"
#include "dptrain/comm/mpi_transport.hpp"
#include "dptrain/core/bf16.hpp"
#include "global_sum.hpp"
#include "grouped_mpi_transport.hpp"

namespace dptrain {
namespace {

std::vector<std::byte> random_elements(DType dtype, std::size_t count, int rank, std::size_t seed) {
  std::mt19937 generator(unsigned(seed * 1000 + std::size_t(rank)));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::byte> bytes(count * element_size(dtype));
  for (std::size_t i = 0; i < count; ++i) {
    const float x = normal(generator);
    if (dtype == DType::f32)
      std::memcpy(bytes.data() + 4 * i, &x, 4);
    else
      reinterpret_cast<bf16*>(bytes.data())[i] = to_bf16(x);
  }
  return bytes;
}

// The elements the operation defines on this rank (reduce-scatter: the own chunk only).
ElementRange defined_range(CollectiveOp op, std::size_t count, int p, int r) {
  if (op != CollectiveOp::reduce_scatter) return {0, count};
  return {chunk_begin(count, p, r), chunk_size(count, p, r)};
}

struct Case {
  Algorithm algo;
  CollectiveOp op;
  DType dtype;
  std::size_t count, piece_bytes;
};

// Elements of `c` that differ between the grouped executor on deferred reduces and the point-to-point executor.
long mismatches(const Case& c, MpiTransport& transport, std::size_t seed) {
  const int p = transport.size(), r = transport.rank();
  const std::vector<std::byte> input = random_elements(c.dtype, c.count, r, seed);
  std::vector<std::byte> grouped = input, reference = input;
  DeferredReduceStreams streams(transport);
  GroupedExecutor executor;
  Scratch grouped_scratch, reference_scratch;
  for (const Schedule& schedule : collective_schedules(c.algo, c.op, r, p, c.count)) {
    executor.run(streams, schedule, grouped.data(), c.dtype, streams.deferred(), grouped_scratch, c.piece_bytes);
    transport.execute(schedule, reference.data(), c.dtype, host_reduce_add, reference_scratch, c.piece_bytes);
  }
  const ElementRange defined = defined_range(c.op, c.count, p, r);
  const std::size_t element = element_size(c.dtype);
  long wrong = 0;
  for (std::size_t i = defined.begin; i < defined.end(); ++i)
    wrong += std::memcmp(grouped.data() + i * element, reference.data() + i * element, element) != 0;
  return wrong;
}

TEST(CommGroupedExecutor, AgreesBitwiseWithThePointToPointExecutorWithReducesDeferred) {
  MpiTransport transport;
  const std::size_t p = std::size_t(transport.size());
  std::size_t seed = 0;
  for (Algorithm algo : {Algorithm::ring, Algorithm::tree}) {
    for (CollectiveOp op : {CollectiveOp::all_reduce, CollectiveOp::reduce_scatter, CollectiveOp::all_gather}) {
      for (DType dtype : {DType::bf16, DType::f32}) {
        for (std::size_t count : {std::size_t{1}, p, 1000 * p + 7}) {
          // Pieces of 3 elements (hundreds of steps, a short last piece), of 1000 bytes, and whole messages.
          for (std::size_t piece_bytes : {3 * element_size(dtype), std::size_t{1000}, SIZE_MAX}) {
            const Case c{algo, op, dtype, count, piece_bytes};
            EXPECT_EQ(global_sum(mismatches(c, transport, ++seed)), 0)
                << algorithm_name(algo) << " " << collective_op_name(op) << " " << dtype_name(dtype) << " count "
                << count << " pieces of " << piece_bytes << " bytes";
          }
        }
      }
    }
  }
}

// The ring's reduce-scatter at pieces of 3 elements: each of the p − 1 rounds is ⌈chunk / 3⌉ steps, one group
// each. Every step after the first kSlotsPerReduce waits for the reduce of the step kSlotsPerReduce before it
// (its scratch slot's previous piece), which also covers its send (the same piece, one round earlier).
TEST(CommGroupedExecutor, RingReduceScatterIsOneGroupPerPieceAndRunsAtMostTheSlotsAhead) {
  MpiTransport transport;
  const int p = transport.size(), r = transport.rank();
  if (p == 1) GTEST_SKIP() << "one rank: the schedule has no rounds";
  const std::size_t count = 30 * std::size_t(p);  // chunks of 30 elements: 10 pieces of 3
  std::vector<std::byte> data = random_elements(DType::f32, count, r, 7);
  DeferredReduceStreams streams(transport);
  GroupedExecutor executor;
  Scratch scratch;
  const Schedule schedule = ring_reduce_scatter_schedule(r, p, count);
  executor.run(streams, schedule, data.data(), DType::f32, streams.deferred(), scratch, 3 * sizeof(float));
  EXPECT_EQ(streams.groups(), std::size_t(p - 1) * 10);
  EXPECT_EQ(streams.waits(), std::size_t(p - 1) * 10 - GroupedExecutor::kSlotsPerReduce);
  const GroupedExecutor::Plan plan = GroupedExecutor::plan(schedule, 3);
  EXPECT_EQ(plan.slots, GroupedExecutor::kSlotsPerReduce);
  EXPECT_EQ(plan.slot_elements, 3u);
}

}  // namespace
}  // namespace dptrain
