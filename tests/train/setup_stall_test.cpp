// A rank stalled during set-up (before step 1, outside the comm executor's watch) ends the job on every rank within
// --comm-timeout, with exit 4 and one line naming the exchange the others waited in; without the set-up's watch
// they would wait for ever. Rank 1 is slowed by a PMPI shim (stall_collective_shim.cpp) in its N-th collective call.
#include <gtest/gtest.h>

#include <chrono>
#include <regex>

#include <fmt/format.h>

#include "test_support.hpp"

namespace dptrain {
namespace {

constexpr int kTimeoutSeconds = 2;
// The stalled rank sleeps far longer than the test allows: only the watch can end the job in time.
constexpr int kStallSeconds = 100;

class SetupStall : public testing::TinyRunTest {
 protected:
  SetupStall() : TinyRunTest("setup_stall", fmt::format("--quiet --steps 2 --comm-timeout {} ", kTimeoutSeconds)) {}

  struct Launch {
    testing::CommandResult result;
    double seconds = 0;
  };
  // Rank 0 as usual, rank 1 stalled in its `call`-th collective.
  Launch stall_rank_1_at(int call, const std::string& flags = "") const {
    const auto start = std::chrono::steady_clock::now();
    Launch launch;
    launch.result = testing::run_command(fmt::format("{} -q {} : -n 1 env LD_PRELOAD={} STALL_AT={} STALL_SECONDS={} {}",
                                            testing::mpiexec(1, 60), dptrain(flags), DPTRAIN_STALL_SHIM, call,
                                            kStallSeconds, dptrain(flags)));
    launch.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return launch;
  }

  // Ended with exit 4 within the set-up's few seconds + the timeout + mpirun's teardown, rank 0 naming `what`.
  static void expect_ended(const Launch& launch, const std::string& what) {
    const std::string& output = launch.result.output;
    EXPECT_EQ(launch.result.exit_code, 4) << output;
    EXPECT_LT(launch.seconds, 30) << output;
    const std::string line = fmt::format("dptrain: rank 0: {} did not complete in {} s\n", what, kTimeoutSeconds);
    EXPECT_NE(output.find(line), std::string::npos) << output;
  }
};

TEST_F(SetupStall, InTheCheckThatEverySetUpSucceeded) {
  // Rank 1's first collective: the agreement on the outcome of building the trainer.
  expect_ended(stall_rank_1_at(1), "the check that every rank's set-up succeeded");
}

TEST_F(SetupStall, ARankWhoseSetUpFailedNamesItsErrorInTheLine) {
  // Rank 0's set-up fails (its environment), rank 1 stalls in the check both go to: rank 0's line says why it
  // was there.
  const auto start = std::chrono::steady_clock::now();
  Launch launch;
  launch.result = testing::run_command(
      fmt::format("{} -q -x DPTRAIN_MPI_WAIT=foo {} : -n 1 env LD_PRELOAD={} STALL_AT=1 STALL_SECONDS={} {}",
                  testing::mpiexec(1, 60), dptrain(""), DPTRAIN_STALL_SHIM, kStallSeconds, dptrain("")));
  launch.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  expect_ended(
      launch,
      "the check that every rank's set-up succeeded (this rank's failed: DPTRAIN_MPI_WAIT is 'foo': expected "
      "spin, yield or sleep (or leave it unset: sleep))");
}

TEST_F(SetupStall, InTheComparisonOfHelp) {
  // After the two all-reduces of that check: the comparison of --help (2 all-gathers).
  expect_ended(stall_rank_1_at(3), "the comparison of --help across ranks");
}

TEST_F(SetupStall, InTheCheckThatEveryPreparationSucceeded) {
  // After that comparison and its own check (2 all-reduces): the check that every rank prepared its model (the
  // allocations made once every rank had measured the memory left).
  expect_ended(stall_rank_1_at(5), "the check that every rank's set-up succeeded");
}

TEST_F(SetupStall, InTheComparisonOfOptions) {
  // After that check (2 all-reduces): the first exchange of connect().
  expect_ended(stall_rank_1_at(9), "the comparison of options across ranks");
}

TEST_F(SetupStall, InTheLinkCalibration) {
  // Rank 1 sleeps in the calibration's MPI_Allreduce of its first size's timings (the ring itself sends and
  // receives point to point): the set-up's collectives before it are the check (2 all-reduces), the comparison of
  // --help (2 all-gathers) and its check (2 all-reduces), the check of the preparation (2 all-reduces), the
  // comparison of options (2 all-gathers; the broadcasts that name a difference are skipped) and --cpu-gemm's
  // timings (1 all-reduce).
  const Launch launch = stall_rank_1_at(12, "--cpu-gemm openblas");
  expect_ended(launch, "the link calibration's all-reduces of 4 KiB");
}

}  // namespace
}  // namespace dptrain
