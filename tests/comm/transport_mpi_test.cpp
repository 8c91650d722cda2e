// MpiTransport under mpiexec: ring exchange of large messages with sends posted before receives (no reliance on
// the eager limit), splitting into pieces, zero-byte messages, matching by posting order (there are no tags), and
// the bytes_sent counter.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <vector>

#include "dptrain/comm/mpi_transport.hpp"
#include "global_sum.hpp"

namespace dptrain {
namespace {

// Each rank sends `bytes` to its right neighbour and receives as many from its left, sends posted first.
long ring_exchange_errors(MpiTransport& transport, std::size_t bytes) {
  const int p = transport.size(), r = transport.rank();
  std::vector<std::uint8_t> out(bytes), in(bytes, 0);
  for (std::size_t i = 0; i < bytes; ++i) out[i] = static_cast<std::uint8_t>(i * 31 + r);
  Request send = transport.isend((r + 1) % p, out.data(), bytes);
  Request recv = transport.irecv((r - 1 + p) % p, in.data(), bytes);
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

// Messages between one pair match in posting order: three messages of different sizes to the right neighbour,
// the receives posted in the same order (the last before the sends are even posted on the peer), each receive
// gets the message of its own size and content. A size mismatch would be an MPI truncation error.
TEST(CommMpiTransport, MessagesMatchInPostingOrder) {
  MpiTransport transport;
  const int p = transport.size(), r = transport.rank();
  const int right = (r + 1) % p, left = (r - 1 + p) % p;
  const std::size_t sizes[] = {1000, 1 << 20, 3};
  std::vector<std::vector<std::uint8_t>> out, in;
  std::vector<Request> requests;
  for (std::size_t m = 0; m < 3; ++m) {
    in.emplace_back(sizes[m], 0);
    requests.push_back(transport.irecv(left, in[m].data(), sizes[m]));
  }
  for (std::size_t m = 0; m < 3; ++m) {
    out.emplace_back(sizes[m]);
    for (std::size_t i = 0; i < sizes[m]; ++i) out[m][i] = static_cast<std::uint8_t>(i * 7 + m * 50 + r);
    requests.push_back(transport.isend(right, out[m].data(), sizes[m]));
  }
  transport.wait_all(requests);
  long errors = 0;
  for (std::size_t m = 0; m < 3; ++m) {
    for (std::size_t i = 0; i < sizes[m]; ++i) errors += in[m][i] != static_cast<std::uint8_t>(i * 7 + m * 50 + left);
  }
  EXPECT_EQ(global_sum(errors), 0);
  long active = 0;
  for (const Request& request : requests) active += request.active();
  EXPECT_EQ(global_sum(active), 0);
}

// wait() marks a request inactive, and waiting again (or for a never-posted request) returns at once.
TEST(CommMpiTransport, WaitingMarksRequestsInactive) {
  MpiTransport transport;
  const int r = transport.rank();
  int value = 41 + r, received = 0;
  Request recv = transport.irecv(r, &received, sizeof received);  // to itself: nothing else is involved
  Request send = transport.isend(r, &value, sizeof value);
  EXPECT_TRUE(recv.active());
  transport.wait(recv);
  transport.wait(send);
  EXPECT_FALSE(recv.active());
  EXPECT_FALSE(send.active());
  transport.wait(recv);  // already waited for: returns at once
  EXPECT_EQ(received, 41 + r);
  Request none;
  transport.wait(none);
  std::vector<Request> nones(3);
  transport.wait_all(nones);
  EXPECT_FALSE(none.active());
  EXPECT_EQ(transport.bytes_sent(), sizeof value);
}

}  // namespace
}  // namespace dptrain
