// Memory that runs out after the start-up estimate passed, provoked honestly: dptrain runs under a lowered
// RLIMIT_DATA (`prlimit --data`, as `ulimit -d` or a batch scheduler sets it), which the estimate (against the
// host's MemAvailable) does not see, so the kernel refuses the allocations themselves. Whether they fail in the
// set-up (the model state) or in the run (a checkpoint's host copies), every rank ends with one line
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
    // The estimate must pass, and the host hold the runs: the largest case needs about 2 × 2.9 GiB.
    if (available_memory_bytes() < 8.0 * (1 << 30))
      GTEST_SKIP() << "less than 8 GiB available: the start-up estimate would refuse these runs before they allocate";
  }
  // `ranks` ranks of dptrain, each under the lowered limit, at most `seconds`; one rank is started as it is
  // without mpiexec (which adds a notice of its own to any non-zero exit).
  std::string limited(int ranks, const std::string& flags, std::size_t limit_bytes = kLimitBytes,
                      int seconds = 60) const {
    return (ranks == 1 ? fmt::format("timeout {}", seconds) : testing::mpiexec(ranks, seconds)) +
           fmt::format(" prlimit --data={} ", limit_bytes) + dptrain(flags);
  }
  // The end of the line that names the limit, e.g. "768.00 MiB".
  static std::string limit_named(const std::string& limit = "768.00 MiB") {
    return "this process's data (ulimit -d) limit " + limit +
           "): the model, --batch or the data are too large for it\n";
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
    if (ranks == 1) {
      EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    }
  }
}

// A checkpoint's host copies (the BF16 weights and this rank's fp32 master, m and v: 14 bytes a parameter) are
// allocated in the run, after the step. Measured with one thread: this 50M-parameter model's set-up and step need
// 2,500–2,600 MiB of RLIMIT_DATA (24 bytes a parameter for its state, 6 more while it is initialised), its save
// 2,900–3,000 MiB; under 2,750 MiB the run trains its step and fails in the save. The job is aborted from the rank
// that failed (MPI_Abort, so no rank waits for it), with its line and exit code 2, and no checkpoint is published.
TEST_F(OutOfMemory, AnAllocationFailingInTheRunEndsEveryRankWithExitCode2) {
  constexpr std::size_t kSaveLimitBytes = std::size_t(2750) << 20;
  const auto limited_save = [&](int ranks, const std::string& name) {
    return limited(ranks, "--steps 1 --width 1024 --layers 4 --heads 8 --save " + (dir_ / name), kSaveLimitBytes,
                   120);
  };
  const std::string limit_line = limit_named("2.69 GiB");
  {
    const auto r = run_command(limited_save(1, "one"));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_EQ(occurrences(r.output, "dptrain: "), 1) << r.output;
    EXPECT_NE(r.output.find("\ndptrain: out of memory ("), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(limit_line), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir_ / "one/latest"));
  }
  {
    const auto r = run_command(limited_save(2, "two"));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    // Each rank that failed before MPI_Abort reached it says so; at least one does, and no other error appears.
    const int lines = occurrences(r.output, "dptrain: rank ");
    EXPECT_GE(lines, 1) << r.output;
    EXPECT_EQ(occurrences(r.output, ": out of memory ("), lines) << r.output;
    EXPECT_EQ(occurrences(r.output, limit_line), lines) << r.output;
    EXPECT_EQ(occurrences(r.output, "dptrain: "), lines) << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir_ / "two/latest"));
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
