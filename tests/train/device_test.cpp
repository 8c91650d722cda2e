// --device: auto, cpu or cuda. A device that cannot run here (a build without CUDA, no driver, no GPU, more ranks
// on the node than GPUs) ends the job at start-up with one line naming what was found, exit 2, on every rank.
// Where a GPU is usable (the GPU check) the same tests ask for more ranks than the node has GPUs instead.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "dptrain/compute/backend.hpp"
#include "dptrain/core/error.hpp"
#include "test_support.hpp"

namespace dptrain {
namespace {

using testing::run_command;

class DeviceOption : public testing::TinyRunTest {
 protected:
  DeviceOption() : TinyRunTest("device", "--quiet --steps 2 ") {}

  // The job printed `reason` in exactly one line, "dptrain: " first, and ended with exit code 2.
  static void expect_refused(const testing::CommandResult& r, const std::string& reason) {
    EXPECT_EQ(r.exit_code, 2) << r.output;
    const std::size_t at = r.output.find(reason);
    ASSERT_NE(at, std::string::npos) << "expected: " << reason << "\n" << r.output;
    const std::size_t line_start = r.output.rfind('\n', at) == std::string::npos ? 0 : r.output.rfind('\n', at) + 1;
    EXPECT_EQ(r.output.substr(line_start, 9), "dptrain: ") << r.output;
    EXPECT_EQ(r.output.find(reason, at + 1), std::string::npos) << "printed twice:\n" << r.output;
  }
};

TEST_F(DeviceOption, CudaWhereItCannotRunEndsEveryRankWithOneLine) {
  for (int ranks : {1, 3}) {
    SCOPED_TRACE(fmt::format("{} rank(s)", ranks));
    // What this machine lacks: no CUDA in the build, no driver or no GPU; with a GPU, fewer GPUs than ranks.
    std::string reason = backend_unavailable("cuda", {.local_rank = 0, .local_size = ranks});
    if (reason.empty()) {
      EXPECT_EQ(ranks, 1) << "a node with 3 or more GPUs: this case needs more ranks than GPUs";
      continue;
    }
    expect_refused(run_command(testing::mpiexec(ranks, 60) + " " + dptrain("--batch 6 --device cuda")), reason);
  }
}

TEST_F(DeviceOption, UnknownDeviceIsRefusedWithTheAcceptedNames) {
  const auto r = run_command(testing::mpiexec(2, 60) + " " + dptrain("--device tpu"));
  expect_refused(r, "--device: unknown device 'tpu' (expected auto, cpu or cuda)");
}

TEST_F(DeviceOption, AutoTrainsOnTheDeviceItFindsAndSaysWhich) {
  const std::string expected = auto_backend_name();
  const auto r = run_command(dptrain("--device auto") + " | grep -o 'device [a-z]* '");
  // --quiet keeps the start-up lines: the device line names the backend auto chose.
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "device " + expected + " \n") << r.output;
}

TEST_F(DeviceOption, CpuRunsEverywhere) {
  const auto r = run_command(testing::mpiexec(2, 60) + " " + dptrain("--device cpu"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("dptrain | device cpu ("), std::string::npos) << r.output;
}

// DPTRAIN_RANKS_PER_GPU places consecutive local ranks on one GPU (tests of several ranks on a one-GPU machine).
TEST(Placement, RanksPerGpuFromTheEnvironment) {
  unsetenv("DPTRAIN_RANKS_PER_GPU");
  EXPECT_EQ(placement_from_environment(3, 4).ranks_per_gpu, 1);
  EXPECT_EQ(placement_from_environment(3, 4).gpu(), 3);
  setenv("DPTRAIN_RANKS_PER_GPU", "2", 1);
  const Placement shared = placement_from_environment(3, 4);
  EXPECT_EQ(shared.local_rank, 3);
  EXPECT_EQ(shared.local_size, 4);
  EXPECT_EQ(shared.gpu(), 1);
  EXPECT_EQ(placement_from_environment(0, 4).gpu(), 0);
  for (const char* bad : {"0", "-1", "two", "2x", ""}) {
    setenv("DPTRAIN_RANKS_PER_GPU", bad, 1);
    EXPECT_THROW(placement_from_environment(0, 1), UserError) << "'" << bad << "'";
  }
  unsetenv("DPTRAIN_RANKS_PER_GPU");
}

}  // namespace
}  // namespace dptrain
