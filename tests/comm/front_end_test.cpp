// The Collectives front end without MPI: algorithm names, the factory's refusal of `native` on a transport
// without native collectives, the refusal of scratch memory the host cannot reach, the native chunk rule, and the
// CommLog records of calls on a single rank.
#include <gtest/gtest.h>

#include <optional>
#include <tuple>

#include "dptrain/comm/collectives.hpp"
#include "dptrain/comm/point_to_point_executor.hpp"
#include "dptrain/core/error.hpp"

namespace dptrain {
namespace {

// A group of one: nothing is ever sent, so any send or receive is a bug.
// A group of `ranks` (rank 0) that nothing can reach: a send or receive throws std::runtime_error.
class SoloTransport final : public Transport {
 public:
  explicit SoloTransport(int ranks = 1, std::optional<double> device_seconds = std::nullopt)
      : ranks_(ranks), device_seconds_(device_seconds) {}
  int rank() const override { return 0; }
  int size() const override { return ranks_; }
  Request isend(int, const void*, std::size_t) override { throw std::runtime_error("isend: no peer here"); }
  Request irecv(int, void*, std::size_t) override { throw std::runtime_error("irecv: no peer here"); }
  void wait(Request&) override {}
  void execute(const Schedule& schedule, void* data, DType dtype, const ReduceAdd& reduce_add, Scratch& scratch,
               std::size_t piece_bytes) override {
    executor_.run(*this, schedule, data, dtype, reduce_add, scratch, piece_bytes);
  }
  std::optional<double> last_device_seconds() const override { return device_seconds_; }

 private:
  int ranks_;
  std::optional<double> device_seconds_;  // as a device transport that times its operations would report
  PointToPointExecutor executor_;
};

// Memory the host may not touch (as a GPU's): allocations are plain host memory, but it says otherwise.
class DeviceLikeMemory final : public Memory {
 public:
  void* allocate(std::size_t bytes) override { return host_memory().allocate(bytes); }
  void release(void* data) noexcept override { host_memory().release(data); }
  void copy(void* dst, const void* src, std::size_t bytes) override { host_memory().copy(dst, src, bytes); }
  void zero(void* dst, std::size_t bytes) override { host_memory().zero(dst, bytes); }
  void upload(void* dst, const void* src, std::size_t bytes) override { host_memory().upload(dst, src, bytes); }
  void download(void* dst, const void* src, std::size_t bytes) override { host_memory().download(dst, src, bytes); }
  bool host_accessible() const override { return false; }
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

TEST(CommFrontEnd, NativeNeedsATransportWithItsOwnCollectives) {
  SoloTransport solo;
  EXPECT_FALSE(solo.has_native());
  try {
    make_collectives(Algorithm::native, solo);
    FAIL() << "no UserError";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(),
                 "--allreduce: 'native' needs a transport with its own collectives (this run's "
                 "transport has none)");
  }
  float x = 0;
  EXPECT_THROW(solo.native(CollectiveOp::all_reduce, &x, 1, DType::f32), std::logic_error);
}

TEST(CommFrontEnd, NativeChunkRuleNamesCountRanksAndFix) {
  EXPECT_NO_THROW(require_native_chunks(CollectiveOp::reduce_scatter, 12, 4));
  EXPECT_NO_THROW(require_native_chunks(CollectiveOp::all_reduce, 10, 4));  // all-reduce has no chunks to give
  EXPECT_NO_THROW(require_native_chunks(CollectiveOp::all_gather, 0, 3));
  try {
    require_native_chunks(CollectiveOp::all_gather, 10, 4);
    FAIL() << "no UserError";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(),
                 "native all_gather needs a count divisible by the number of ranks, got count 10 on 4 "
                 "ranks (pad it to a multiple of 4, or use ring or tree)");
  }
}

TEST(CommFrontEnd, ThePointToPointExecutorRefusesScratchTheHostCannotReach) {
  SoloTransport pair(2);
  DeviceLikeMemory device;
  auto ring = make_collectives(Algorithm::ring, pair, host_reduce_add, device);
  std::vector<float> data{1, 2, 3, 4};
  // Refused before anything is sent (a send would throw runtime_error).
  EXPECT_THROW(ring->all_reduce(data.data(), data.size(), DType::f32), std::logic_error);
}

TEST(CommFrontEnd, OneRankOnDeviceMemoryMovesNothingAndIsNoError) {
  SoloTransport solo;  // a single GPU: its collectives are empty schedules, wherever the data lives
  DeviceLikeMemory device;
  for (Algorithm a : {Algorithm::ring, Algorithm::tree}) {
    auto collectives = make_collectives(a, solo, host_reduce_add, device);
    std::vector<float> data{1, 2, 3};
    EXPECT_NO_THROW(collectives->all_reduce(data.data(), data.size(), DType::f32));
    EXPECT_EQ(data, (std::vector<float>{1, 2, 3}));
  }
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
    const auto records = collectives->log().take();
    ASSERT_EQ(records.size(), 3u);
    EXPECT_EQ(records[0].op, CollectiveOp::all_reduce);
    EXPECT_EQ(records[0].algo, a);
    EXPECT_EQ(records[0].bytes, 12u);
    EXPECT_EQ(records[2].dtype, DType::bf16);
    EXPECT_EQ(records[2].count, 2u);
    EXPECT_EQ(records[2].bytes, 4u);
    for (const CommRecord& record : records) EXPECT_EQ(record.bytes_sent, 0u);  // one rank sends nothing
    EXPECT_TRUE(collectives->log().take().empty());                             // taking leaves the log empty
  }
}

// A transport that times its operations on its device: the record takes that time, placed on the host clock as
// ending when the call returned; without one, the host's clock times the call. A ring all-reduce is two schedules
// (reduce-scatter, then all-gather), each timed by the transport: the call's time is their sum; the tree's is one.
TEST(CommFrontEnd, DeviceTimeOfATransportIsTheCallsTime) {
  for (const std::optional<double> device : {std::optional<double>{}, std::optional<double>{0.25}}) {
    for (const auto& [algorithm, op, parts] : {std::tuple{Algorithm::ring, CollectiveOp::all_reduce, 2},
                                               std::tuple{Algorithm::ring, CollectiveOp::reduce_scatter, 1},
                                               std::tuple{Algorithm::ring, CollectiveOp::all_gather, 1},
                                               std::tuple{Algorithm::tree, CollectiveOp::all_reduce, 1}}) {
      SoloTransport solo(1, device);
      auto collectives = make_collectives(algorithm, solo);
      std::vector<float> data{1, 2, 3};
      collectives->run(op, data.data(), data.size(), DType::f32);
      const auto records = collectives->log().take();
      ASSERT_EQ(records.size(), 1u);
      const CommRecord& r = records[0];
      EXPECT_DOUBLE_EQ(r.exit_s - r.entry_s, r.seconds);
      EXPECT_EQ(r.transfer_s, r.seconds);
      if (device) {
        EXPECT_EQ(r.seconds, 0.25 * parts) << algorithm_name(algorithm) << " " << collective_op_name(op);
      } else {
        EXPECT_GE(r.seconds, 0.0);
        EXPECT_LT(r.seconds, 0.25);  // a no-op on one rank: far below a quarter second
      }
    }
  }
}

TEST(CommLog, TakeAndClear) {
  CommLog log;
  log.add({.op = CollectiveOp::all_gather, .count = 4, .bytes = 8, .bytes_sent = 6, .seconds = 0.25});
  log.add({.op = CollectiveOp::all_reduce, .count = 4, .bytes = 8, .bytes_sent = 12, .seconds = 0.5});
  const std::vector<CommRecord> taken = log.take();
  ASSERT_EQ(taken.size(), 2u);  // oldest first
  EXPECT_EQ(taken[0].op, CollectiveOp::all_gather);
  EXPECT_EQ(taken[1].bytes_sent, 12u);
  EXPECT_EQ(taken[1].seconds, 0.5);
  EXPECT_TRUE(log.take().empty());
  log.add({.op = CollectiveOp::reduce_scatter, .count = 2, .bytes = 4});
  log.clear();
  EXPECT_TRUE(log.take().empty());
}

}  // namespace
}  // namespace dptrain
