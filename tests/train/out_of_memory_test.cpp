// Memory that runs out after the start-up estimate passed, provoked honestly: dptrain runs under a lowered
// RLIMIT_DATA (`prlimit --data`, as `ulimit -d` or a batch scheduler sets it), which the estimate (against the
// host's MemAvailable) does not see, so the kernel refuses the allocations themselves. Whether they fail in the
// set-up (the model state) or in the run (the evaluation's token windows), every rank ends with one line
// `dptrain: out of memory (...)` naming the limit, and exit code 2, within a bounded time. Also: the estimate's own
// refusal with two ranks.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "dptrain/core/available_memory.hpp"
#include "test_support.hpp"

namespace dptrain {
namespace {

using testing::occurrences;
using testing::run_command;

constexpr std::size_t kLimitBytes = std::size_t(768) << 20;  // 768 MiB of private writable memory per rank

class OutOfMemory : public testing::TinyRunTest {
 protected:
  // The host's memory is what is limited: the cpu backend also where a GPU is visible.
  OutOfMemory()
      : TinyRunTest("oom", "--device cpu --quiet --peak-tflops 1 --link alpha=10us,bw=1GB/s --eval-every 0 ") {}
  void SetUp() override {
    if (run_command("prlimit --data=1073741824 true").exit_code != 0)
      GTEST_SKIP() << "prlimit (util-linux) is not available to lower RLIMIT_DATA";
    // The estimate must pass: the largest case needs about 2 × 1.1 GiB of the host's available memory.
    if (available_memory_bytes() < 6.0 * (1 << 30))
      GTEST_SKIP() << "less than 6 GiB available: the start-up estimate would refuse these runs before they allocate";
  }
  // `ranks` ranks of dptrain, each under the lowered limit, at most 60 s; one rank is started as it is without
  // mpiexec (which adds a notice of its own to any non-zero exit).
  std::string limited(int ranks, const std::string& flags) const {
    return (ranks == 1 ? std::string("timeout 60") : testing::mpiexec(ranks, 60)) +
           fmt::format(" prlimit --data={} ", kLimitBytes) + dptrain(flags);
  }
  static const std::string& limit_named() {
    static const std::string text = "this process's data (ulimit -d) limit 768.00 MiB): the model, --batch, "
                                    "--eval-windows or the data are too large for it\n";
    return text;
  }
};

// The limit leaves room for start-up and the steps of the tiny model: what fails below is the large allocation.
TEST_F(OutOfMemory, TheTinyRunFitsUnderTheLimit) {
  for (int ranks : {1, 2}) {
    const auto r = run_command(limited(ranks, "--steps 2"));
    EXPECT_EQ(r.exit_code, 0) << ranks << " rank(s)\n" << r.output;
  }
}

// The model state (about 2.4 GB for 100M parameters) is allocated in the set-up, after the estimate: every rank
// fails there, and the first speaks for all with the plain error line.
TEST_F(OutOfMemory, AnAllocationFailingInTheSetUpEndsEveryRankWithOneLine) {
  for (int ranks : {1, 2}) {
    const auto r = run_command(limited(ranks, "--steps 2 --width 1024 --layers 8 --heads 8"));
    EXPECT_EQ(r.exit_code, 2) << ranks << " rank(s)\n" << r.output;
    EXPECT_EQ(occurrences(r.output, "dptrain: "), 1) << r.output;  // beside it only mpiexec's notice
    EXPECT_EQ(occurrences(r.output, "dptrain: out of memory ("), 1) << r.output;
    EXPECT_NE(r.output.find(limit_named()), std::string::npos) << r.output;
    if (ranks == 1) EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
}

// The evaluation at the end allocates its token windows (1.1 GB per rank here) in the run, after the steps: the
// job is aborted from the rank that failed (MPI_Abort, so no rank waits for it), with its line and exit code 2.
TEST_F(OutOfMemory, AnAllocationFailingInTheRunEndsEveryRankWithExitCode2) {
  {
    const auto r = run_command(limited(1, "--steps 2 --eval-windows 16000000"));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_EQ(occurrences(r.output, "dptrain: "), 1) << r.output;
    EXPECT_NE(r.output.find("\ndptrain: out of memory ("), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(limit_named()), std::string::npos) << r.output;
  }
  {
    const auto r = run_command(limited(2, "--steps 2 --eval-windows 32000000"));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    // Each rank that failed before MPI_Abort reached it says so; at least one does, and no other error appears.
    const int lines = occurrences(r.output, "dptrain: rank ");
    EXPECT_GE(lines, 1) << r.output;
    EXPECT_EQ(occurrences(r.output, ": out of memory ("), lines) << r.output;
    EXPECT_EQ(occurrences(r.output, limit_named()), lines) << r.output;
    EXPECT_EQ(occurrences(r.output, "dptrain: "), lines) << r.output;
  }
}

// The estimate's refusal with two ranks (the one-rank case is in cli_test.cpp): before anything is allocated, one
// line for the job, exit 2.
TEST_F(OutOfMemory, TheEstimateRefusesWithTwoRanksInOneLine) {
  const auto r = run_command(testing::mpiexec(2, 60) + " " + dptrain("--width 65536 --layers 1024 --heads 1"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(occurrences(r.output, "dptrain: "), 1) << r.output;  // beside it only mpiexec's notice
  EXPECT_EQ(occurrences(r.output, "dptrain: the run needs about "), 1) << r.output;
  EXPECT_NE(r.output.find(" × 2 rank(s) on this host = "), std::string::npos) << r.output;
}

}  // namespace
}  // namespace dptrain
