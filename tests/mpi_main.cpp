// main() for MPI test executables: every rank runs every test; rank 0 prints as gtest does, the other ranks only
// their failures (each line prefixed with the rank), and the exit code is the same on all ranks (a failure on any
// rank fails the test on all).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

namespace {

// A rank's failed assertions, as "rank R: Suite.Test: file:line: message".
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    std::fprintf(stderr, "rank %d: %s.%s: %s:%d: %s\n", rank_, test ? test->test_suite_name() : "",
                 test ? test->name() : "", result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
  }

 private:
  int rank_;
};

}  // namespace

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
    listeners.Append(new FailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any_failed && !failed) fprintf(stderr, "rank %d: passed, but another rank failed\n", rank);
  MPI_Finalize();
  return any_failed;
}
