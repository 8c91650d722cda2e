// Ring, tree and native collectives under mpiexec, against exact sums: every op × dtype × count in
// {0, 1, p−1, p, 1000003}. Contributions are integers in [−4, 4] times a power of two per element, so every
// partial sum in any order is exact even in BF16 (|sum| ≤ 4·p ≤ 24 units): the three algorithms must then agree
// bit for bit. Also checks the exact wire bytes each rank sent (ring and tree) and the log records. Verdicts are
// summed over ranks so rank 0, the only one printing, reports every rank's errors.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "dptrain/comm/collectives.hpp"
#include "dptrain/comm/mpi_transport.hpp"
#include "dptrain/core/bf16.hpp"

namespace dptrain {
namespace {

// The algorithms under test; the ring also with small pieces (1000 B: not a whole number of elements for fp32,
// so many pieces per chunk and a short last one) and unpipelined (one message per chunk).
struct Variant {
  Algorithm algo;
  std::size_t ring_piece_bytes = kRingPieceBytes;
};
const Variant kVariants[] = {{Algorithm::ring}, {Algorithm::ring, 1000}, {Algorithm::ring, SIZE_MAX},
                             {Algorithm::tree}, {Algorithm::native}};

std::unique_ptr<Collectives> make(const Variant& variant, MpiTransport& transport) {
  if (variant.algo == Algorithm::ring) {
    return make_ring_collectives(transport, host_reduce_add, variant.ring_piece_bytes);
  }
  return make_collectives(variant.algo, transport);
}
constexpr std::size_t kLargeCount = 1000003;  // prime: unequal chunks for every p > 1

long global_sum(long value) {
  long total = 0;
  MPI_Allreduce(&value, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

float contribution(int rank, std::size_t i) {
  const int units = static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 13) % 9) - 4;
  return std::ldexp(static_cast<float>(units), static_cast<int>(i % 5) - 3);
}

float sum_over_ranks(int p, std::size_t i) {
  float sum = 0;  // exact: the partial sums are small multiples of one power of two
  for (int q = 0; q < p; ++q) sum += contribution(q, i);
  return sum;
}

// A typed view of a byte buffer of `count` elements.
struct Buffer {
  Buffer(DType dtype, std::size_t count) : dtype(dtype), count(count), bytes(count * element_size(dtype)) {}

  float get(std::size_t i) const {
    if (dtype == DType::f32) return reinterpret_cast<const float*>(bytes.data())[i];
    return to_float(reinterpret_cast<const bf16*>(bytes.data())[i]);
  }
  void set(std::size_t i, float value) {
    if (dtype == DType::f32) {
      reinterpret_cast<float*>(bytes.data())[i] = value;
    } else {
      reinterpret_cast<bf16*>(bytes.data())[i] = to_bf16(value);
    }
  }
  std::size_t element_bytes(std::size_t begin, std::size_t end) const { return (end - begin) * element_size(dtype); }

  DType dtype;
  std::size_t count;
  std::vector<std::byte> bytes;
};

int owner_of(std::size_t i, std::size_t count, int p) {
  int q = 0;
  while (chunk_begin(count, p, q + 1) <= i) ++q;
  return q;
}

// The input of `op` on rank r: all-gather has only the own chunk valid (the rest is a sentinel that must be
// overwritten); the reductions start from every element of the rank's contribution.
Buffer input(CollectiveOp op, DType dtype, std::size_t count, int r, int p) {
  Buffer buffer(dtype, count);
  const std::size_t own_begin = chunk_begin(count, p, r), own_end = chunk_begin(count, p, r + 1);
  for (std::size_t i = 0; i < count; ++i) {
    const bool own = i >= own_begin && i < own_end;
    buffer.set(i, op == CollectiveOp::all_gather && !own ? 12345.0f : contribution(r, i));
  }
  return buffer;
}

// Elements of the result range (everything, or chunk r for reduce-scatter) that differ from the exact answer.
long wrong_elements(const Buffer& result, CollectiveOp op, int r, int p) {
  const std::size_t count = result.count;
  std::size_t begin = 0, end = count;
  if (op == CollectiveOp::reduce_scatter) begin = chunk_begin(count, p, r), end = chunk_begin(count, p, r + 1);
  long wrong = 0;
  for (std::size_t i = begin; i < end; ++i) {
    const float expected =
        op == CollectiveOp::all_gather ? contribution(owner_of(i, count, p), i) : sum_over_ranks(p, i);
    wrong += result.get(i) != expected;
  }
  return wrong;
}

std::size_t subtree_elements(std::size_t count, int p, int node) {
  if (node >= p) return 0;
  return chunk_size(count, p, node) + subtree_elements(count, p, 2 * node + 1) +
         subtree_elements(count, p, 2 * node + 2);
}

// Wire bytes rank r must send, counted independently of the implementation from what each algorithm moves.
std::uint64_t expected_bytes_sent(Algorithm algo, CollectiveOp op, std::size_t count, DType dtype, int r, int p) {
  if (p == 1 || count == 0) return 0;
  const std::uint64_t element = element_size(dtype), whole = count * element;
  if (algo != Algorithm::tree) {  // ring, and native which records what the ring would send
    const std::uint64_t reduce_scatter = (count - chunk_size(count, p, r)) * element;
    const std::uint64_t all_gather = (count - chunk_size(count, p, (r + 1) % p)) * element;
    if (op == CollectiveOp::reduce_scatter) return reduce_scatter;
    if (op == CollectiveOp::all_gather) return all_gather;
    return reduce_scatter + all_gather;
  }
  const int children = (2 * r + 1 < p) + (2 * r + 2 < p);
  const std::uint64_t to_parent = r == 0 ? 0 : whole;
  switch (op) {
    case CollectiveOp::all_reduce: return to_parent + children * whole;
    case CollectiveOp::reduce_scatter:
      return to_parent + (subtree_elements(count, p, 2 * r + 1) + subtree_elements(count, p, 2 * r + 2)) * element;
    case CollectiveOp::all_gather: return (r == 0 ? 0 : subtree_elements(count, p, r) * element) + children * whole;
  }
  return 0;
}

void check_op(CollectiveOp op) {
  MpiTransport transport;
  const int p = transport.size(), r = transport.rank();
  for (DType dtype : {DType::bf16, DType::f32}) {
    for (std::size_t count : std::set<std::size_t>{0, 1, std::size_t(p - 1), std::size_t(p), kLargeCount}) {
      SCOPED_TRACE(::testing::Message() << collective_op_name(op) << " " << dtype_name(dtype) << " count " << count);
      std::vector<Buffer> results;
      long wrong = 0, wrong_bytes = 0, wrong_records = 0;
      for (const Variant& variant : kVariants) {
        const Algorithm algo = variant.algo;
        auto collectives = make(variant, transport);
        Buffer buffer = input(op, dtype, count, r, p);
        collectives->run(op, buffer.bytes.data(), count, dtype);
        wrong += wrong_elements(buffer, op, r, p);
        const auto records = collectives->log().records();
        wrong_records += records.size() != 1 || records[0].op != op || records[0].algo != algo ||
                         records[0].dtype != dtype || records[0].count != count ||
                         records[0].bytes != count * element_size(dtype) || !(records[0].seconds >= 0);
        if (!records.empty()) wrong_bytes += records[0].bytes_sent != expected_bytes_sent(algo, op, count, dtype, r, p);
        results.push_back(std::move(buffer));
      }
      EXPECT_EQ(global_sum(wrong), 0);
      EXPECT_EQ(global_sum(wrong_bytes), 0);
      EXPECT_EQ(global_sum(wrong_records), 0);
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
  EXPECT_EQ(ring->log().total_bytes_sent(), 2 * (p - 1) * payload / p);
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
  Scratch scratch;
  ring_all_reduce(transport, counting, data.data(), count, DType::f32, scratch);
  const std::size_t expected = p == 1 ? 0 : count - chunk_size(count, p, (r - 1 + p) % p);
  EXPECT_EQ(global_sum(reduced != expected), 0);
  long wrong = 0;
  for (float x : data) wrong += x != 2.0f * p;
  EXPECT_EQ(global_sum(wrong), 0);
}

}  // namespace
}  // namespace dptrain
