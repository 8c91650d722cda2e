// --cpu-gemm auto under mpiexec: every rank keeps the same library (--check-every 1 compares the weights after
// every step), the start-up line and the summary name it, and the run trains bitwise what that library trains
// when named.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "test_support.hpp"

namespace dptrain {
namespace {

class CpuGemmAuto : public testing::TinyRunTest {
 protected:
  CpuGemmAuto() : TinyRunTest("cpu-gemm-auto", "--peak-tflops 1 --link alpha=10us,bw=1GB/s ") {}
  testing::LoggedRun run(int ranks, const std::string& flags) {
    const std::string log = dir_ / fmt::format("run-{}.jsonl", counter_++);
    return testing::run_logged(
        testing::mpiexec(ranks) + " " +
            dptrain(fmt::format("--steps 4 --batch 6 --check-every 1 --log {} {}", log, flags)),
        log);
  }
  int counter_ = 0;
};

TEST_F(CpuGemmAuto, EveryRankKeepsTheSameLibraryAndTrainsWhatItTrainsByName) {
  const testing::LoggedRun automatic = run(3, "--cpu-gemm auto");
  ASSERT_EQ(automatic.exit_code, 0) << automatic.output;
  const nlohmann::json& choice = automatic.summary["cpu_gemm"];
  EXPECT_EQ(choice["requested"], "auto");
  const std::string library = choice["library"].get<std::string>();
  EXPECT_NE(automatic.output.find("device cpu (sgemm auto → " + library + ": "), std::string::npos)
      << automatic.output;
  for (const auto& [name, kinds] : choice["gflops"].items()) {
    ASSERT_EQ(kinds.size(), 3u) << name;
    for (const char* kind : {"nt", "nn", "tn"}) EXPECT_GT(kinds[kind].get<double>(), 0.0) << name << " " << kind;
  }
  const testing::LoggedRun named = run(3, "--cpu-gemm " + library);
  ASSERT_EQ(named.losses.size(), 4u);
  EXPECT_EQ(automatic.losses, named.losses);
  EXPECT_EQ(automatic.grad_norms, named.grad_norms);
  EXPECT_EQ(named.summary["cpu_gemm"], (nlohmann::json{{"requested", library}, {"library", library}}));
}

}  // namespace
}  // namespace dptrain
