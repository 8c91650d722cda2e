// Ranks started with different options or data (MPMD launches) are refused at start-up within seconds, exit 2,
// with one line naming the option, the rank and both values; options the table marks per-rank may differ.
#include <gtest/gtest.h>

#include <chrono>

#include <fmt/format.h>

#include "dptrain/core/cpu_info.hpp"
#include "dptrain/train/cpu_gemm_choice.hpp"
#include "test_support.hpp"

namespace dptrain {
namespace {

using testing::run_command;

// Far below the 120 s a hang would take to reach the tests' own timeout; a refusal takes one start-up (~2 s).
constexpr int kRefusalSeconds = 30;

class RankAgreement : public testing::TinyRunTest {
 protected:
  RankAgreement() : TinyRunTest("agree", "--quiet --steps 2 ") {}

  struct Launch {
    testing::CommandResult result;
    double seconds = 0;
  };
  // `first_ranks` ranks run with flags_a, one more with flags_b.
  Launch mpmd(int first_ranks, const std::string& flags_a, const std::string& flags_b) const {
    const auto start = std::chrono::steady_clock::now();
    Launch launch;
    launch.result = run_command(testing::mpiexec(first_ranks, kRefusalSeconds) + " -q " + dptrain(flags_a) +
                                " : -n 1 " + dptrain(flags_b));
    launch.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return launch;
  }

  // The job ended in time with exit code 2 and printed `message` exactly once, as one whole line.
  static void expect_refused(const Launch& launch, const std::string& message) {
    const std::string& output = launch.result.output;
    EXPECT_EQ(launch.result.exit_code, 2) << output;
    EXPECT_LT(launch.seconds, kRefusalSeconds) << output;
    const std::string line = "dptrain: " + message + "\n";
    const std::size_t at = output.find(line);
    EXPECT_NE(at, std::string::npos) << output;
    EXPECT_TRUE(at == 0 || output[at - 1] == '\n') << output;
    EXPECT_EQ(output.find(line, at + 1), std::string::npos) << "printed twice:\n" << output;
  }
};

TEST_F(RankAgreement, DifferentSaveDirectoriesAreRefused) {
  // Without the check rank 1 would wait forever at the checkpoint's barrier.
  const auto launch = mpmd(1, "--save " + (dir_ / "a"), "--save " + (dir_ / "b"));
  expect_refused(launch, fmt::format("rank 1: --save is '{}' but rank 0 has '{}': every rank must be started with "
                                     "the same options",
                                     dir_ / "b", dir_ / "a"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "a"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "b"));
}

TEST_F(RankAgreement, HelpOnSomeRanksOnlyIsRefused) {
  // Without the check rank 1 would print the help and return while rank 0 waited for it for ever.
  expect_refused(mpmd(1, "", "--help"),
                 "rank 1: --help is 'given' but rank 0 has 'not given': every rank must be "
                 "started with the same options");
  expect_refused(mpmd(2, "--batch 6 -h", "--batch 6"),
                 "rank 2: --help is 'not given' but rank 0 has 'given': every rank must be "
                 "started with the same options");
}

TEST_F(RankAgreement, ABadTransportVariableOnOneRankIsRefusedByThatRank) {
  // Each rank reads its own environment: refused only when the transport connects, rank 1 would leave rank 0 in
  // a collective it never joins.
  for (const auto& [variable, message] :
       {std::pair{"DPTRAIN_MPI_WAIT=foo",
                  "rank 1: DPTRAIN_MPI_WAIT is 'foo': expected spin, yield or sleep (or leave "
                  "it unset: sleep)"},
        std::pair{"DPTRAIN_MPI_SPIN_US=-5",
                  "rank 1: DPTRAIN_MPI_SPIN_US is '-5': expected whole microseconds from 0 to 10000000"}}) {
    SCOPED_TRACE(variable);
    const auto start = std::chrono::steady_clock::now();
    Launch launch;
    launch.result = run_command(testing::mpiexec(1, kRefusalSeconds) + " -q " + dptrain("") + " : -n 1 -x " +
                                variable + " " + dptrain(""));
    launch.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    expect_refused(launch, message);
  }
}

TEST_F(RankAgreement, DifferentLinksAreRefused) {
  // A rank with --link skips the calibration sweep the other enters.
  const auto launch = mpmd(1, "", "--link ib-400g");
  expect_refused(launch, "rank 1: --link is 'ib-400g' but rank 0 has '': every rank must be started with the same "
                         "options");
}

TEST_F(RankAgreement, DifferentDataIsRefusedNamingTheRankThatDiffers) {
  // Same length, one byte changed: only the tokens' hash tells the files apart.
  std::string text = testing::small_corpus_text();
  text[100] = 'X';
  testing::write_text(dir_ / "other.txt", text);
  const auto launch = mpmd(2, "--batch 6", "--batch 6 --data " + (dir_ / "other.txt"));  // 3 ranks
  const std::string& output = launch.result.output;
  EXPECT_EQ(launch.result.exit_code, 2) << output;
  EXPECT_LT(launch.seconds, kRefusalSeconds) << output;
  const std::string tokens = fmt::format("{} tokens, fnv1a ", text.size());
  const std::size_t at = output.find(fmt::format("dptrain: rank 2: --data is '{} ({}", dir_ / "other.txt", tokens));
  ASSERT_NE(at, std::string::npos) << output;
  const std::string line = output.substr(at, output.find('\n', at) - at);
  EXPECT_NE(line.find(fmt::format(")' but rank 0 has '{} ({}", dir_ / "corpus.txt", tokens)), std::string::npos)
      << line;
  EXPECT_TRUE(line.ends_with(")': every rank must be started with the same options")) << line;
}

// --cpu-gemm by-cpu (the default) resolves on each host's CPU: hosts whose CPUs resolve it to different libraries
// would train with different bits, so the resolved library is agreed (DPTRAIN_CPUINFO stands for each host's
// /proc/cpuinfo). Where the build has no oneDNN both resolve to OpenBLAS and the job runs.
TEST_F(RankAgreement, HostsWhoseCpusResolveByCpuDifferentlyAreRefused) {
  testing::write_text(dir_ / "avx512.txt", "model name\t: AVX-512 host\nflags\t\t: fpu avx avx2 fma avx512f\n");
  testing::write_text(dir_ / "avx2.txt", "model name\t: AVX2 host\nflags\t\t: fpu avx avx2 fma\n");
  const std::string on_avx512 = cpu_gemm_for_cpu(parse_cpuinfo(testing::file_bytes(dir_ / "avx512.txt"))).library;
  ASSERT_EQ(cpu_gemm_for_cpu(parse_cpuinfo(testing::file_bytes(dir_ / "avx2.txt"))).library, "openblas");
  const auto start = std::chrono::steady_clock::now();
  Launch launch;
  launch.result = run_command(testing::mpiexec(1, kRefusalSeconds) + " -q env DPTRAIN_CPUINFO=" +
                              (dir_ / "avx512.txt") + " " + dptrain("") + " : -n 1 env DPTRAIN_CPUINFO=" +
                              (dir_ / "avx2.txt") + " " + dptrain(""));
  launch.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (on_avx512 == "openblas") {
    EXPECT_EQ(launch.result.exit_code, 0) << launch.result.output;
    return;
  }
  expect_refused(launch, fmt::format("rank 1: --cpu-gemm is 'by-cpu (openblas)' but rank 0 has 'by-cpu ({})': "
                                     "every rank must be started with the same options",
                                     on_avx512));
}

// And one option spelt two ways: --overlap off and --no-overlap are one value.
TEST_F(RankAgreement, PerRankOptionsAndTheSameDataAtAnotherPathMayDiffer) {
  testing::write_text(dir_ / "copy.txt", testing::small_corpus_text());
  const auto launch =
      mpmd(1, "--overlap off --threads 1 --log " + (dir_ / "run.jsonl"),
           "--no-overlap --threads 2 --data " + (dir_ / "copy.txt") + " --log " + (dir_ / "ignored.jsonl"));
  EXPECT_EQ(launch.result.exit_code, 0) << launch.result.output;
  EXPECT_NE(launch.result.output.find("dptrain | done: 2 steps"), std::string::npos) << launch.result.output;
  EXPECT_TRUE(std::filesystem::exists(dir_ / "run.jsonl"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "ignored.jsonl"));  // only rank 0 writes the log
}

}  // namespace
}  // namespace dptrain
