// The clock of the entry times (now_seconds: std::chrono::steady_clock, CLOCK_MONOTONIC on Linux) is one clock for
// every process of a machine, so ranks on one host can compare entry times without aligning clocks: in a
// ping-pong, the time rank r reads between rank 0's send and receive lies between the two times rank 0 read.
#include <gtest/gtest.h>
#include <mpi.h>

#include "dptrain/core/timer.hpp"
#include "global_sum.hpp"

namespace dptrain {
namespace {

TEST(CommClock, EveryRankReadsTheSameSteadyClock) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long out_of_order = 0;
  for (int peer = 1; peer < size; ++peer) {
    for (int round = 0; round < 5; ++round) {
      if (rank == 0) {
        const double sent = now_seconds();
        double theirs = 0;
        MPI_Send(&sent, 1, MPI_DOUBLE, peer, 0, MPI_COMM_WORLD);
        MPI_Recv(&theirs, 1, MPI_DOUBLE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        const double received = now_seconds();
        out_of_order += !(sent <= theirs && theirs <= received);
      } else if (rank == peer) {
        double sent = 0;
        MPI_Recv(&sent, 1, MPI_DOUBLE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        const double mine = now_seconds();
        MPI_Send(&mine, 1, MPI_DOUBLE, 0, 0, MPI_COMM_WORLD);
      }
    }
  }
  EXPECT_EQ(global_sum(out_of_order), 0);
}

}  // namespace
}  // namespace dptrain
