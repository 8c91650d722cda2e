// MpiTransport under mpiexec: ring exchange of large messages with sends posted before receives (no reliance on
// the eager limit), splitting into pieces, zero-byte messages, and the bytes_sent counter.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <vector>

#include "dptrain/comm/mpi_transport.hpp"

namespace dptrain {
namespace {

long global_sum(long value) {
  long total = 0;
  MPI_Allreduce(&value, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

// Each rank sends `bytes` to its right neighbour and receives as many from its left, sends posted first.
long ring_exchange_errors(MpiTransport& transport, std::size_t bytes) {
  const int p = transport.size(), r = transport.rank();
  std::vector<std::uint8_t> out(bytes), in(bytes, 0);
  for (std::size_t i = 0; i < bytes; ++i) out[i] = static_cast<std::uint8_t>(i * 31 + r);
  Request send = transport.isend((r + 1) % p, 7, out.data(), bytes);
  Request recv = transport.irecv((r - 1 + p) % p, 7, in.data(), bytes);
  std::vector<Request> both{send, recv};
  transport.wait_all(both);
  EXPECT_FALSE(both[0].active());
  long errors = 0;
  const int left = (r - 1 + p) % p;
  for (std::size_t i = 0; i < bytes; ++i) errors += in[i] != static_cast<std::uint8_t>(i * 31 + left);
  return errors;
}

TEST(CommMpiTransport, RankAndSizeMatchTheWorld) {
  MpiTransport transport;
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(transport.rank(), rank);
  EXPECT_EQ(transport.size(), size);
}

TEST(CommMpiTransport, LargeMessagesSendsFirstAndCounter) {
  MpiTransport transport;
  EXPECT_EQ(global_sum(ring_exchange_errors(transport, 8 << 20)), 0);  // 8 MiB: far beyond any eager limit
  EXPECT_EQ(transport.bytes_sent(), 8u << 20);
  transport.reset_bytes_sent();
  EXPECT_EQ(global_sum(ring_exchange_errors(transport, 0)), 0);
  EXPECT_EQ(transport.bytes_sent(), 0u);
}

TEST(CommMpiTransport, MessagesSplitIntoPieces) {
  MpiTransport transport(MPI_COMM_WORLD, /*max_piece_bytes=*/4096);
  EXPECT_EQ(global_sum(ring_exchange_errors(transport, 4096 * 5 + 17)), 0);
  EXPECT_EQ(global_sum(ring_exchange_errors(transport, 4096)), 0);
  EXPECT_EQ(transport.bytes_sent(), 4096u * 6 + 17);
}

TEST(CommMpiTransport, WaitOnInactiveRequestReturns) {
  MpiTransport transport;
  Request none;
  transport.wait(none);
  std::vector<Request> nones(3);
  transport.wait_all(nones);
  SUCCEED();
}

}  // namespace
}  // namespace dptrain
