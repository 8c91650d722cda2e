// The MPI ring against its specification when sums round: random BF16 (and fp32) values of mixed magnitude,
// the real ring all-reduce and reduce-scatter under mpiexec, compared bit for bit with ring_order_sum() — the
// order of addition and per-hop rounding of ring_order.hpp, computed on each rank from every rank's values. The
// order must not depend on how the executor pieces the messages, so three piece sizes are held to it.
#include <gtest/gtest.h>
#include <mpi.h>

#include <bit>
#include <cstring>
#include <set>
#include <vector>

#include "dptrain/comm/collectives.hpp"
#include "dptrain/comm/mpi_transport.hpp"
#include "dptrain/core/bf16.hpp"
#include "global_sum.hpp"
#include "ring_order.hpp"

namespace dptrain {
namespace {

// Bits of element i of a buffer of dtype, widened to fp32 bits (BF16 is the top half).
std::uint32_t bits_at(const std::vector<std::byte>& bytes, std::size_t i, DType dtype) {
  if (dtype == DType::f32) {
    std::uint32_t u;
    std::memcpy(&u, bytes.data() + 4 * i, 4);
    return u;
  }
  std::uint16_t h;
  std::memcpy(&h, bytes.data() + 2 * i, 2);
  return std::uint32_t{h} << 16;
}

void store(std::vector<std::byte>& bytes, std::size_t i, float value, DType dtype) {
  if (dtype == DType::f32) {
    std::memcpy(bytes.data() + 4 * i, &value, 4);
  } else {
    const bf16 b = to_bf16(value);
    std::memcpy(bytes.data() + 2 * i, &b, 2);
  }
}

TEST(CommRingOrder, InexactSumsMatchTheSpecificationBitForBit) {
  MpiTransport transport;
  const int p = transport.size(), r = transport.rank();
  long wrong = 0, rounded = 0;
  for (DType dtype : {DType::bf16, DType::f32}) {
    for (std::size_t count : std::set<std::size_t>{1, std::size_t(p + 1), 100003}) {
      for (std::size_t piece_bytes : {kRingPieceBytes, std::size_t{1000}, SIZE_MAX}) {
        for (CollectiveOp op : {CollectiveOp::all_reduce, CollectiveOp::reduce_scatter}) {
          auto ring = make_collectives(Algorithm::ring, transport, host_reduce_add, host_memory(), piece_bytes);
          std::vector<std::byte> data(count * element_size(dtype));
          for (std::size_t i = 0; i < count; ++i) store(data, i, mixed_value(r, i, dtype), dtype);
          ring->run(op, data.data(), count, dtype);
          for (int c = 0; c < p; ++c) {
            if (op == CollectiveOp::reduce_scatter && c != r) continue;  // only chunk r is defined
            for (std::size_t i = chunk_begin(count, p, c); i < chunk_begin(count, p, c + 1); ++i) {
              const auto value = [&](int q) { return mixed_value(q, i, dtype); };
              const float expected = ring_order_sum(p, c, dtype, value);
              wrong += bits_at(data, i, dtype) != std::bit_cast<std::uint32_t>(expected);
              // Evidence that the inputs do round: the exact (double) sum differs from the ring's.
              double exact = 0;
              for (int q = 0; q < p; ++q) exact += value(q);
              rounded += static_cast<double>(expected) != exact;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(global_sum(wrong), 0);
  const long rounded_anywhere = global_sum(rounded);  // collective: every rank calls it
  if (p >= 2) {
    EXPECT_GT(rounded_anywhere, 0);
  }
}

}  // namespace
}  // namespace dptrain
