// Ring, tree and native collectives under mpiexec, against exact sums: every op × dtype × count in
// {0, 1, p−1, p, 1000003, 4099·p}. Contributions are integers in [−4, 4] times a power of two per
// element, so every partial sum in any order is exact even in BF16 (|sum| ≤ 4·p ≤ 24 units): the algorithms must
// then agree bit for bit. Native reduce-scatter and all-gather must refuse counts p does not divide. Also checks
// the exact wire bytes each rank sent, the log records, and that the scratch comes from the Memory given. Verdicts
// are summed over ranks so rank 0, the only one printing, reports every rank's errors.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "dptrain/comm/collectives.hpp"
#include "dptrain/comm/mpi_transport.hpp"
#include "dptrain/core/bf16.hpp"
#include "dptrain/core/error.hpp"
#include "exact_sums.hpp"
#include "expected_bytes.hpp"
#include "global_sum.hpp"
#include "grouped_mpi_transport.hpp"

namespace dptrain {
namespace {

// The algorithms under test; the ring also with small pieces (1000 B: not a whole number of elements for fp32,
// so many pieces per chunk and a short last one) and unpipelined (one message per chunk); ring and tree also as
// the NCCL transport runs schedules (grouped steps, reduces deferred as long as allowed: grouped_mpi_transport.hpp).
struct Variant {
  Algorithm algo;
  std::size_t ring_piece_bytes = kRingPieceBytes;
  bool grouped = false;
};
const Variant kVariants[] = {
    {Algorithm::ring},   {Algorithm::ring, 1000},       {Algorithm::ring, SIZE_MAX},      {Algorithm::tree},
    {Algorithm::native}, {Algorithm::ring, 1000, true}, {Algorithm::tree, SIZE_MAX, true}};

std::unique_ptr<Collectives> make(const Variant& variant, MpiTransport& transport, GroupedMpiTransport& grouped) {
  Transport& chosen = variant.grouped ? static_cast<Transport&>(grouped) : transport;
  return make_collectives(variant.algo, chosen, host_reduce_add, host_memory(), variant.ring_piece_bytes);
}
constexpr std::size_t kLargeCount = 1000003;  // prime: unequal chunks for every p > 1

void check_op(CollectiveOp op) {
  MpiTransport transport;
  GroupedMpiTransport grouped;
  const int p = transport.size(), r = transport.rank();
  for (DType dtype : {DType::bf16, DType::f32}) {
    const std::size_t large_multiple = 4099 * static_cast<std::size_t>(p);  // several 1000 B pieces per chunk
    for (std::size_t count :
         std::set<std::size_t>{0, 1, std::size_t(p - 1), std::size_t(p), kLargeCount, large_multiple}) {
      SCOPED_TRACE(::testing::Message() << collective_op_name(op) << " " << dtype_name(dtype) << " count " << count);
      std::vector<TypedBytes> results;
      long wrong = 0, wrong_bytes = 0, wrong_records = 0;
      long wrong_refusals = 0;
      for (const Variant& variant : kVariants) {
        const Algorithm algo = variant.algo;
        auto collectives = make(variant, transport, grouped);
        TypedBytes buffer = input(op, dtype, count, r, p);
        if (algo == Algorithm::native && op != CollectiveOp::all_reduce && count % p != 0) {
          // Every rank refuses on its own, before any communication, so no rank is left waiting.
          try {
            collectives->run(op, buffer.bytes.data(), count, dtype);
            ++wrong_refusals;
          } catch (const UserError& e) {
            wrong_refusals += std::string(e.what()).find("divisible by the number of ranks") == std::string::npos;
          }
          continue;
        }
        collectives->run(op, buffer.bytes.data(), count, dtype);
        wrong += wrong_elements(buffer, op, r, p);
        const auto records = collectives->log().take();
        // A call that communicates takes time; a no-op (one rank, nothing to move) may not register any.
        const bool moved = p > 1 && count > 0;
        wrong_records += records.size() != 1 || records[0].op != op || records[0].algo != algo ||
                         records[0].dtype != dtype || records[0].count != count ||
                         records[0].bytes != count * element_size(dtype) || (moved && !(records[0].seconds > 0));
        if (!records.empty())
          wrong_bytes += records[0].bytes_sent != expected_bytes_sent(algo, op, count, dtype, r, p);
        results.push_back(std::move(buffer));
      }
      EXPECT_EQ(global_sum(wrong), 0);
      EXPECT_EQ(global_sum(wrong_bytes), 0);
      EXPECT_EQ(global_sum(wrong_records), 0);
      EXPECT_EQ(global_sum(wrong_refusals), 0);
      // Bitwise agreement of all variants on the defined part of the result.
      std::size_t begin = 0, end = count;
      if (op == CollectiveOp::reduce_scatter) begin = chunk_begin(count, p, r), end = chunk_begin(count, p, r + 1);
      const std::size_t offset = results[0].element_bytes(0, begin), length = results[0].element_bytes(begin, end);
      long disagreements = 0;
      for (std::size_t a = 1; a < results.size(); ++a) {
        disagreements += std::memcmp(results[0].bytes.data() + offset, results[a].bytes.data() + offset, length) != 0;
      }
      EXPECT_EQ(global_sum(disagreements), 0);
    }
  }
}

TEST(CommCollectives, AllReduce) { check_op(CollectiveOp::all_reduce); }
TEST(CommCollectives, ReduceScatter) { check_op(CollectiveOp::reduce_scatter); }
TEST(CommCollectives, AllGather) { check_op(CollectiveOp::all_gather); }

TEST(CommCollectives, RingWireBytesAreTwoPMinusOneOverPTimesMWhenPDividesCount) {
  MpiTransport transport;
  const int p = transport.size();
  const std::size_t count = 1024 * static_cast<std::size_t>(p);
  std::vector<bf16> data(count, to_bf16(1.0f));
  auto ring = make_collectives(Algorithm::ring, transport);
  ring->all_reduce(data.data(), count, DType::bf16);
  const std::uint64_t payload = count * 2;
  EXPECT_EQ(transport.bytes_sent(), 2 * (p - 1) * payload / p);
  const auto records = ring->log().take();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].bytes_sent, 2 * (p - 1) * payload / p);
  long wrong = 0;
  for (bf16 x : data) wrong += to_float(x) != static_cast<float>(p);
  EXPECT_EQ(global_sum(wrong), 0);
}

// The ring reduces only through the callback it is given: rank r adds in every chunk it receives in the
// reduce-scatter, i.e. all but chunk r−1, which it sends first without receiving it.
TEST(CommCollectives, RingReducesThroughTheCallback) {
  MpiTransport transport;
  const int p = transport.size(), r = transport.rank();
  const std::size_t count = 1000;
  std::size_t reduced = 0;
  ReduceAdd counting = [&](void* acc, const void* in, std::size_t n, DType dtype) {
    reduced += n;
    host_reduce_add(acc, in, n, dtype);
  };
  std::vector<float> data(count, 2.0f);
  make_collectives(Algorithm::ring, transport, counting)->all_reduce(data.data(), count, DType::f32);
  const std::size_t expected = p == 1 ? 0 : count - chunk_size(count, p, (r - 1 + p) % p);
  EXPECT_EQ(global_sum(reduced != expected), 0);
  long wrong = 0;
  for (float x : data) wrong += x != 2.0f * p;
  EXPECT_EQ(global_sum(wrong), 0);
}

// Host memory that counts what is allocated from it and how much it still holds.
class CountingMemory final : public Memory {
 public:
  void* allocate(std::size_t bytes) override {
    void* data = host_memory().allocate(bytes);
    ++allocations;
    held += bytes;
    sizes[data] = bytes;
    return data;
  }
  void release(void* data) noexcept override {
    held -= sizes[data];
    sizes.erase(data);
    host_memory().release(data);
  }
  void copy(void* dst, const void* src, std::size_t bytes) override { host_memory().copy(dst, src, bytes); }
  void zero(void* dst, std::size_t bytes) override { host_memory().zero(dst, bytes); }
  void upload(void* dst, const void* src, std::size_t bytes) override { host_memory().upload(dst, src, bytes); }
  void download(void* dst, const void* src, std::size_t bytes) override { host_memory().download(dst, src, bytes); }
  bool host_accessible() const override { return true; }

  int allocations = 0;
  std::size_t held = 0;
  std::map<void*, std::size_t> sizes;
};

// The receive scratch comes from the Memory given to make_collectives and goes back to it with the collectives:
// the ring's is kReceiveWindow pieces, a tree rank's one whole vector per child.
TEST(CommCollectives, ScratchComesFromTheMemoryGiven) {
  MpiTransport transport;
  const int p = transport.size(), r = transport.rank();
  const std::size_t count = std::size_t{1} << 20;  // fp32: 4 MiB, so up to p = 6 a ring chunk spans ≥ 2 pieces
  CountingMemory memory;
  long wrong = 0;
  for (Algorithm algo : {Algorithm::ring, Algorithm::tree}) {
    {
      auto collectives = make_collectives(algo, transport, host_reduce_add, memory);
      std::vector<float> data(count, 1.0f);
      collectives->all_reduce(data.data(), count, DType::f32);
      collectives->all_reduce(data.data(), count, DType::f32);  // the second call reuses the scratch
      for (float x : data) wrong += x != static_cast<float>(p * p);
      std::size_t expected = 0;  // bytes of scratch this rank needs
      if (p > 1 && algo == Algorithm::ring) {
        expected = PointToPointExecutor::kReceiveWindow * kRingPieceBytes;  // every chunk spans ≥ 2 pieces
      }
      if (p > 1 && algo == Algorithm::tree) {
        expected = ((2 * r + 1 < p) + (2 * r + 2 < p)) * count * 4;  // one whole vector per child
      }
      wrong += memory.held != expected;
      wrong += memory.allocations != (expected > 0 ? 1 : 0);
    }
    wrong += memory.held != 0;  // released with the collectives
    memory.allocations = 0;
  }
  EXPECT_EQ(global_sum(wrong), 0);
}

}  // namespace
}  // namespace dptrain
