// The Collectives front end without MPI: algorithm names, the factory's refusal of `native` on a non-MPI
// transport, and the CommLog records of calls on a single rank.
#include <gtest/gtest.h>

#include "dptrain/comm/collectives.hpp"
#include "dptrain/core/error.hpp"

namespace dptrain {
namespace {

// A group of one: nothing is ever sent, so any send or receive is a bug.
class SoloTransport final : public Transport {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Request isend(int, int, const void*, std::size_t) override { throw std::logic_error("isend on a group of one"); }
  Request irecv(int, int, void*, std::size_t) override { throw std::logic_error("irecv on a group of one"); }
  void wait(Request&) override {}
};

TEST(CommAlgorithm, NamesRoundTripAndBadNameIsAUserError) {
  for (Algorithm a : {Algorithm::ring, Algorithm::tree, Algorithm::native}) {
    EXPECT_EQ(parse_algorithm(algorithm_name(a)), a);
  }
  try {
    parse_algorithm("x");
    FAIL() << "no UserError";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "--allreduce: unknown algorithm 'x' (expected ring, tree or native)");
  }
  EXPECT_EQ(collective_op_name(CollectiveOp::reduce_scatter), "reduce_scatter");
}

TEST(CommFrontEnd, NativeNeedsTheMpiTransport) {
  SoloTransport solo;
  EXPECT_THROW(make_collectives(Algorithm::native, solo), UserError);
}

TEST(CommFrontEnd, SingleRankCallsAreNoOpsAndAreLogged) {
  SoloTransport solo;
  for (Algorithm a : {Algorithm::ring, Algorithm::tree}) {
    auto collectives = make_collectives(a, solo);
    std::vector<float> data{1, 2, 3};
    collectives->all_reduce(data.data(), data.size(), DType::f32);
    collectives->reduce_scatter(data.data(), data.size(), DType::f32);
    collectives->all_gather(data.data(), 2, DType::bf16);
    EXPECT_EQ(data, (std::vector<float>{1, 2, 3}));
    const auto records = collectives->log().records();
    ASSERT_EQ(records.size(), 3u);
    EXPECT_EQ(records[0].op, CollectiveOp::all_reduce);
    EXPECT_EQ(records[0].algo, a);
    EXPECT_EQ(records[0].bytes, 12u);
    EXPECT_EQ(records[2].dtype, DType::bf16);
    EXPECT_EQ(records[2].count, 2u);
    EXPECT_EQ(records[2].bytes, 4u);
    EXPECT_EQ(collectives->log().total_bytes(), 28u);
    EXPECT_EQ(collectives->log().total_bytes_sent(), 0u);
    EXPECT_GE(collectives->log().total_seconds(), 0.0);
    EXPECT_EQ(collectives->log().take().size(), 3u);
    EXPECT_EQ(collectives->log().size(), 0u);
  }
}

TEST(CommLog, TotalsAndClear) {
  CommLog log;
  log.add({.op = CollectiveOp::all_gather, .count = 4, .bytes = 8, .bytes_sent = 6, .seconds = 0.25});
  log.add({.op = CollectiveOp::all_reduce, .count = 4, .bytes = 8, .bytes_sent = 12, .seconds = 0.5});
  EXPECT_EQ(log.size(), 2u);
  EXPECT_EQ(log.total_bytes(), 16u);
  EXPECT_EQ(log.total_bytes_sent(), 18u);
  EXPECT_EQ(log.total_seconds(), 0.75);
  log.clear();
  EXPECT_EQ(log.size(), 0u);
  EXPECT_EQ(log.total_seconds(), 0.0);
}

}  // namespace
}  // namespace dptrain
