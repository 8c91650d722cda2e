// NcclTransport's host code, run on the CPU over the fake NCCL and CUDA runtime of nccl_on_cpu/ (fake_nccl.hpp):
// the transport as built for GPUs, its streams threads that pause at random before every item, so that a transfer,
// a reduce-add or a slot reuse not ordered by the events the transport records finds its data unfinished.
//   - ring (three piece sizes), tree and native give the exact sums of exact_sums.hpp on a non-blocking and on a
//     blocking communicator, every operation timed by its events, and no call is made on a communicator whose
//     last call is still in progress (NCCL forbids it);
//   - isend/irecv are issued as one group at the first wait;
//   - a stalled operation ends within the deadline in ncclCommAbort and a CommTimeout naming it, an asynchronous
//     error in the line that names the error, on every rank;
//   - abort() waits a bounded time for a blocking call that holds the communicator and then leaves it, waits for
//     an open group to be closed (never aborts under it), and waits a bounded time for ncclCommAbort itself; on an
//     idle transport it aborts at once and later calls say so;
//   - simulated_seconds() is NCCL's estimate (made on the blocking communicator it opens) in seconds.
#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "dptrain/comm/collectives.hpp"
#include "dptrain/comm/nccl_transport.hpp"
#include "dptrain/core/memory.hpp"
#include "exact_sums.hpp"
#include "global_sum.hpp"
#include "nccl_on_cpu/fake_nccl.hpp"

namespace dptrain {
namespace {

// A stream of the fake runtime, standing in for the engine's comm stream.
struct FakeStream {
  FakeStream() { cudaStreamCreateWithFlags(&handle, cudaStreamNonBlocking); }
  ~FakeStream() { cudaStreamDestroy(handle); }
  FakeStream(const FakeStream&) = delete;
  FakeStream& operator=(const FakeStream&) = delete;
  cudaStream_t handle = nullptr;
};

struct Variant {
  Algorithm algo;
  std::size_t piece_bytes;
};
// The ring in the pieces training uses between CPU ranks, in 1000 B pieces (not a whole number of fp32 elements:
// many steps per round, scratch slots reused) and unpipelined; the tree; NCCL's own.
const Variant kVariants[] = {{Algorithm::ring, kRingPieceBytes},
                             {Algorithm::ring, 1000},
                             {Algorithm::ring, SIZE_MAX},
                             {Algorithm::tree, SIZE_MAX},
                             {Algorithm::native, SIZE_MAX}};

// Runs `op` through `collectives` on exact-sum data; the elements that differ from the exact answer, plus one where
// the call's log record is wrong or untimed although it moved data.
long check_collective(Collectives& collectives, CollectiveOp op, DType dtype, std::size_t count) {
  const int p = collectives.size(), r = collectives.rank();
  TypedBytes buffer = input(op, dtype, count, r, p);
  collectives.run(op, buffer.bytes.data(), count, dtype);
  long wrong = wrong_elements(buffer, op, r, p);
  const auto records = collectives.log().take();
  const bool moved = p > 1 && count > 0;
  wrong += records.size() != 1 || records[0].op != op || (moved && !(records[0].seconds > 0));
  return wrong;
}

TEST(CommNcclOnCpu, CollectivesGiveExactSumsOnBothKindsOfCommunicator) {
  for (bool blocking : {false, true}) {
    FakeStream stream;
    NcclTransport transport(MPI_COMM_WORLD, 0, stream.handle, NcclSettings{.timeout_s = 60, .blocking = blocking});
    const int p = transport.size();
    long wrong = 0;
    for (const Variant& variant : kVariants) {
      auto collectives =
          make_collectives(variant.algo, transport, transport.reduce_add(), host_memory(), variant.piece_bytes);
      for (CollectiveOp op : {CollectiveOp::all_reduce, CollectiveOp::reduce_scatter, CollectiveOp::all_gather}) {
        for (DType dtype : {DType::bf16, DType::f32}) {
          for (std::size_t count :
               std::set<std::size_t>{0, 1, std::size_t(p - 1), std::size_t(p), 4099 * std::size_t(p), 30011}) {
            SCOPED_TRACE(::testing::Message()
                         << (blocking ? "blocking " : "non-blocking ") << algorithm_name(variant.algo) << " pieces "
                         << variant.piece_bytes << " " << collective_op_name(op) << " " << dtype_name(dtype)
                         << " count " << count);
            // NCCL's reduce-scatter and all-gather take equal chunks (refused otherwise: collectives_mpi_test).
            if (variant.algo == Algorithm::native && op != CollectiveOp::all_reduce && count % p != 0) continue;
            const long wrong_here = check_collective(*collectives, op, dtype, count);
            EXPECT_EQ(wrong_here, 0);
            wrong += wrong_here;
          }
        }
      }
    }
    EXPECT_EQ(global_sum(wrong), 0);
  }
  EXPECT_EQ(global_sum(fake_nccl::calls_while_in_progress()), 0);
}

TEST(CommNcclOnCpu, PointToPointIsIssuedAsOneGroupAtTheFirstWait) {
  FakeStream stream;
  NcclTransport transport(MPI_COMM_WORLD, 0, stream.handle, NcclSettings{});
  const int p = transport.size(), r = transport.rank();
  const int right = (r + 1) % p, left = (r - 1 + p) % p;
  std::vector<int> sent(1000), received(1000, -1);
  for (std::size_t i = 0; i < sent.size(); ++i) sent[i] = r * 100000 + int(i);
  Request requests[2] = {transport.irecv(left, received.data(), received.size() * sizeof(int)),
                         transport.isend(right, sent.data(), sent.size() * sizeof(int))};
  transport.wait_all(requests);
  long wrong = 0;
  for (std::size_t i = 0; i < received.size(); ++i) wrong += received[i] != left * 100000 + int(i);
  EXPECT_EQ(global_sum(wrong), 0);
  EXPECT_EQ(transport.bytes_sent(), sent.size() * sizeof(int));
}

// Runs `call`, which must throw; returns its message ("" if it returned).
template <typename Call>
std::string message_of(Call&& call) {
  try {
    call();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(CommNcclOnCpu, AStalledOperationEndsInAnAbortAndTheLineThatNamesIt) {
  int p = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  for (bool blocking : {false, true}) {
    // One rank has no ring to run: the schedule is empty, no group is issued that could stall.
    for (Algorithm algo : p > 1 ? std::vector{Algorithm::ring, Algorithm::native} : std::vector{Algorithm::native}) {
      SCOPED_TRACE(::testing::Message() << (blocking ? "blocking " : "non-blocking ") << algorithm_name(algo));
      FakeStream stream;
      NcclTransport transport(MPI_COMM_WORLD, 0, stream.handle, NcclSettings{.timeout_s = 0.3, .blocking = blocking});
      auto collectives = make_collectives(algo, transport, transport.reduce_add(), host_memory());
      std::vector<float> data(4096, 1.0f);
      const int aborts_before = fake_nccl::aborts();
      fake_nccl::stall_next_group();
      const auto start = std::chrono::steady_clock::now();
      bool timed_out = false;
      const std::string message = message_of([&] {
        try {
          collectives->all_reduce(data.data(), data.size(), DType::f32);
        } catch (const CommTimeout&) {
          timed_out = true;
          throw;
        }
      });
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      fake_cuda::drain_all();  // what the aborted operation left queued runs before its buffers go
      const std::string what = algo == Algorithm::native ? "all_reduce" : "schedule";
      EXPECT_EQ(message, "NCCL: " + what + " did not complete in 0.3 s");
      EXPECT_TRUE(timed_out) << "a CommTimeout, which the engine and dpbench end the job with (exit 4)";
      EXPECT_EQ(fake_nccl::aborts(), aborts_before + 1);
      EXPECT_GE(seconds, 0.3);
      EXPECT_LT(seconds, 5.0);
    }
  }
}

TEST(CommNcclOnCpu, AnAsynchronousErrorEndsTheOperationNamingTheError) {
  for (bool blocking : {false, true}) {
    FakeStream stream;
    NcclTransport transport(MPI_COMM_WORLD, 0, stream.handle, NcclSettings{.timeout_s = 30, .blocking = blocking});
    std::vector<float> data(64, 1.0f);
    const int aborts_before = fake_nccl::aborts();
    fake_nccl::stall_next_group();  // the data never comes; the error is what the transport must see
    fake_nccl::set_async_error(ncclSystemError);
    const std::string message =
        message_of([&] { transport.native(CollectiveOp::all_reduce, data.data(), data.size(), DType::f32); });
    fake_nccl::set_async_error(ncclSuccess);
    fake_cuda::drain_all();
    EXPECT_EQ(message, "NCCL: all_reduce failed: unhandled system error (fake NCCL: injected error)");
    EXPECT_EQ(fake_nccl::aborts(), aborts_before + 1);
    MPI_Barrier(MPI_COMM_WORLD);  // every rank has read the error before another test clears it
  }
}

TEST(CommNcclOnCpu, AnAbortWaitsABoundedTimeForABlockingCallThenLeavesTheCommunicator) {
  FakeStream stream;
  NcclTransport transport(MPI_COMM_WORLD, 0, stream.handle, NcclSettings{.timeout_s = 30, .blocking = true});
  const int p = transport.size();
  std::vector<float> data(1000, 1.0f);
  fake_nccl::set_blocking_group_end_seconds(3.5);  // the call holds the communicator 3.5 s (a peer not answering)
  std::thread call([&] { transport.native(CollectiveOp::all_reduce, data.data(), data.size(), DType::f32); });
  while (!fake_nccl::in_held_group_end()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const int aborts_before = fake_nccl::aborts();
  const auto start = std::chrono::steady_clock::now();
  transport.abort();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  call.join();
  fake_nccl::set_blocking_group_end_seconds(0);
  EXPECT_GE(seconds, 1.9);  // the 2 s the abort waits for the call, not the call's 3.5 s
  EXPECT_LT(seconds, 3.4);
  EXPECT_EQ(fake_nccl::aborts(), aborts_before);  // left as it was: the job's end ends it
  long wrong = 0;                                 // the call completed undisturbed
  for (float x : data) wrong += x != float(p);
  EXPECT_EQ(global_sum(wrong), 0);
}

TEST(CommNcclOnCpu, AnAbortFromAnotherThreadWaitsUntilTheOpenGroupIsClosed) {
  for (bool blocking : {false, true}) {
    SCOPED_TRACE(blocking ? "blocking" : "non-blocking");
    FakeStream stream;
    NcclTransport transport(MPI_COMM_WORLD, 0, stream.handle, NcclSettings{.timeout_s = 30, .blocking = blocking});
    // To this rank itself: no peer's data is awaited by a group that one rank's abort leaves unmoved.
    const int self = transport.rank();
    std::vector<float> out(256, 1.0f), in(256, 0.0f);
    const std::size_t bytes = out.size() * sizeof(float);
    const int aborts_before = fake_nccl::aborts(), in_group_before = fake_nccl::aborts_while_a_group_was_open();
    fake_nccl::set_send_seconds(1.0);  // the send holds the group open a second
    std::string message;
    std::atomic<bool> returned{false};
    std::thread comm([&] {
      message = message_of([&] {
        Request requests[] = {transport.isend(self, out.data(), bytes), transport.irecv(self, in.data(), bytes)};
        transport.wait_all(requests);
      });
      returned = true;
    });
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!fake_nccl::in_held_send() && !returned && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_FALSE(returned) << "the exchange ended before the abort could come inside its group: " << message;
    transport.abort();  // a watchdog's, while the comm thread is inside the group
    comm.join();
    fake_nccl::set_send_seconds(0);
    fake_cuda::drain_all();
    EXPECT_EQ(fake_nccl::aborts(), aborts_before + 1);
    EXPECT_EQ(fake_nccl::aborts_while_a_group_was_open(), in_group_before);
    // The abort came once the group was closed: before the exchange completed, which then says so, or after.
    EXPECT_TRUE(message.empty() || (message.starts_with("NCCL: ") && message.ends_with(" ended by an abort")))
        << message;
  }
}

TEST(CommNcclOnCpu, AnAbortThatWaitsForThePeersIsLeftAfterABoundedTime) {
  FakeStream stream;
  NcclTransport transport(MPI_COMM_WORLD, 0, stream.handle, NcclSettings{});
  const int aborts_before = fake_nccl::aborts();
  fake_nccl::set_abort_seconds(5);  // ncclCommAbort waiting for other ranks' aborts that do not come
  const auto start = std::chrono::steady_clock::now();
  transport.abort();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fake_nccl::set_abort_seconds(0);
  EXPECT_EQ(fake_nccl::aborts(), aborts_before + 1);
  EXPECT_GE(seconds, 2.9);  // the 3 s abort() gives the library, not the 5 s it takes
  EXPECT_LT(seconds, 4.5);
}

TEST(CommNcclOnCpu, AnAbortOfAnIdleTransportIsAtOnceAndLaterCallsSaySo) {
  FakeStream stream;
  NcclTransport transport(MPI_COMM_WORLD, 0, stream.handle, NcclSettings{});
  const int aborts_before = fake_nccl::aborts();
  const auto start = std::chrono::steady_clock::now();
  transport.abort();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 0.5);
  EXPECT_EQ(fake_nccl::aborts(), aborts_before + 1);
  std::vector<float> data(8, 1.0f);
  EXPECT_EQ(message_of([&] { transport.native(CollectiveOp::all_reduce, data.data(), data.size(), DType::f32); }),
            "NCCL: all_reduce ended by an abort");
}

TEST(CommNcclOnCpu, SimulatedSecondsAreNcclsEstimateInSeconds) {
  FakeStream stream;
  NcclTransport transport(MPI_COMM_WORLD, 0, stream.handle, NcclSettings{});
  const int p = transport.size();
  std::vector<bf16> data(1000 * std::size_t(p));
  // The fake's model: 7 µs + 1 ns per byte of the call's count (all-reduce: the whole vector; reduce-scatter: a
  // rank's chunk).
  const auto all_reduce =
      transport.simulated_seconds(CollectiveOp::all_reduce, data.size(), DType::bf16, data.data());
  ASSERT_TRUE(all_reduce.has_value());
  EXPECT_NEAR(*all_reduce, (7.0 + 2e-3 * double(data.size())) * 1e-6, 1e-12);
  const auto scatter =
      transport.simulated_seconds(CollectiveOp::reduce_scatter, data.size(), DType::bf16, data.data());
  ASSERT_TRUE(scatter.has_value());
  EXPECT_NEAR(*scatter, (7.0 + 2e-3 * 1000) * 1e-6, 1e-12);
  EXPECT_EQ(global_sum(fake_nccl::calls_while_in_progress()), 0);
}

}  // namespace
}  // namespace dptrain
