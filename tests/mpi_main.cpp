// main() for MPI test executables: every rank runs every test; only rank 0 prints, and the exit code is the
// same on all ranks (a failure on any rank fails the test on all).
#include <gtest/gtest.h>
#include <mpi.h>

int main(int argc, char** argv) {
  // As dptrain initialises it: the engine's comm thread and the caller's may both call MPI.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any_failed && !failed) fprintf(stderr, "rank %d: passed, but another rank failed\n", rank);
  MPI_Finalize();
  return any_failed;
}
