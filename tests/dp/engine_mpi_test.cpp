// The engine on several ranks (MPI, the ring over MpiTransport), on every backend that runs here — the cpu backend
// and the cuda backend's own code on the CPU harness, whose kernel launches a GPU would refuse are refused here
// too: ZeRO stages 1–3 train what stage 0 trains, and an evaluation whose windows the ranks do not share evenly
// (rank 0 has none) gives, at every stage, the loss the ranks' windows have under stage 0. Stage 3 makes every rank
// walk as many passes as the busiest rank, gathering the weights unit by unit: a rank without windows must still
// take part in each all-gather, without computing (a GPU refuses a launch over no rows).
//
// Tolerances: the stages differ only in where the weights and optimizer state live, so the cpu backend gives the
// same bits (the CLI's zero tests hold it bitwise); on the BF16 backend the gathered weights are the same values in
// other buffers, and 1e-5 relative leaves room for a GEMM library that picks kernels by address alignment while a
// wrong unit, a missed all-gather or a stale shard moves the loss by far more (percents after three steps at
// lr 1e-2).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "../kernels/cuda_on_cpu_backend.hpp"
#include "dptrain/comm/algorithm.hpp"
#include "dptrain/comm/mpi_transport.hpp"
#include "dptrain/dp/engine.hpp"
#include "dptrain/train/run_transport.hpp"

namespace dptrain {
namespace {

constexpr std::size_t kLocalWindows = 2;

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}
int world_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

RankGroup mpi_group() {
  RankGroup group;
  group.rank = world_rank();
  group.size = world_size();
  group.sum_scalar = [](double x) {
    std::vector<double> all(static_cast<std::size_t>(world_size()));
    MPI_Allgather(&x, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, MPI_COMM_WORLD);
    double total = 0;
    for (double v : all) total += v;  // in rank order: the same bits on every rank
    return total;
  };
  group.max_scalar = [](double x) {
    MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return x;
  };
  return group;
}

// Window w of a shared pool: Q+1 tokens, different for every w.
std::vector<std::int32_t> pool_windows(const ModelConfig& c, std::size_t first, std::size_t count) {
  const std::size_t length = std::size_t(c.seq) + 1;
  std::vector<std::int32_t> out(count * length);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::size_t g = first * length + i;
    out[i] = std::int32_t((g * 7 + g / 5 + 3) % std::size_t(c.vocab));
  }
  return out;
}

// One engine at `stage` on a backend of its own, connected to the other ranks by the ring.
struct RankEngine {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<DataParallelEngine> engine;
  RunTransport transport;

  RankEngine(const std::string& backend_name, const ModelConfig& config, int stage)
      : backend(test::make_backend_under_test(backend_name)) {
    engine = std::make_unique<DataParallelEngine>(
        config, *backend, mpi_group(), EngineSettings{.zero_stage = stage, .bucket_mb = 0, .comm_timeout_s = 60},
        kLocalWindows);
    transport =
        connect_run_transport(*backend, Algorithm::ring, engine->comm_stream(), 0, 60, /*nccl_blocking=*/false);
    engine->set_collectives(transport.collectives.get());
    engine->initialise(5);
  }
};

class EngineRanks : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (const std::string why = test::backend_under_test_unavailable(GetParam()); !why.empty()) GTEST_SKIP() << why;
  }
  // Two blocks, one unit per block (bucket 0): units final norm, block 1, block 0, embeddings. Width 12 puts the
  // biases at offsets no multiple of 8 in the flat weights (the BF16 backend's bias epilogue needs 16 bytes).
  ModelConfig config{.vocab = 23, .seq = 5, .layers = 2, .width = 12, .heads = 2};
  OptimizerSettings optimizer{.lr = 1e-2, .weight_decay = 0.1, .grad_clip = 1.0};
};

TEST_P(EngineRanks, ZeroStagesTrainWhatStageZeroTrains) {
  const int p = world_size(), r = world_rank();
  std::vector<std::vector<double>> losses(4);
  for (int stage = 0; stage <= 3; ++stage) {
    RankEngine rank(GetParam(), config, stage);
    for (int step = 0; step < 3; ++step) {
      const auto windows =
          pool_windows(config, (std::size_t(step) * std::size_t(p) + std::size_t(r)) * kLocalWindows, kLocalWindows);
      const StepResult result = rank.engine->step(windows.data(), kLocalWindows * std::size_t(p), optimizer);
      ASSERT_TRUE(result.finite) << "stage " << stage << " step " << step;
      losses[std::size_t(stage)].push_back(result.loss);
    }
  }
  for (int stage = 1; stage <= 3; ++stage)
    for (std::size_t step = 0; step < losses[0].size(); ++step)
      EXPECT_NEAR(losses[std::size_t(stage)][step], losses[0][step], 1e-5 * losses[0][step])
          << "stage " << stage << " step " << step << " on " << p << " ranks";
}

TEST_P(EngineRanks, EvaluationWithRanksWithoutWindowsGivesTheLossOfEveryWindowAtEveryStage) {
  const int p = world_size(), r = world_rank();
  // Rank r evaluates r windows (rank 0 none, the last rank up to two passes of kLocalWindows), after the first of
  // them in the pool.
  const std::size_t mine = std::size_t(r), first = std::size_t(r) * std::size_t(r - 1) / 2;
  const auto windows = pool_windows(config, first, mine);
  std::vector<double> totals;
  for (int stage : {0, 3}) {
    RankEngine rank(GetParam(), config, stage);
    const double local = rank.engine->loss_sum(windows.data(), mine);
    if (mine == 0) {
      EXPECT_EQ(local, 0.0) << "stage " << stage;
    }
    totals.push_back(mpi_group().sum_scalar(local));
  }
  const double positions = double(std::size_t(p) * std::size_t(p - 1) / 2) * double(config.seq);
  if (p > 1) {
    EXPECT_GT(totals[0], positions * 0.5);  // Σ of −log p over every evaluated position: well above 0
  }
  EXPECT_NEAR(totals[1], totals[0], 1e-5 * std::max(1.0, totals[0])) << p << " ranks";
}

INSTANTIATE_TEST_SUITE_P(Backends, EngineRanks, ::testing::ValuesIn(test::backends_under_test()),
                         [](const auto& info) { return info.param; });

// A transport that watches its own deadline (NCCL's) throws CommTimeout from inside the collective; the engine ends
// the job with the watchdog's line, naming the task that timed out, and not with the transport's message.
class TimingOutCollectives final : public Collectives {
 public:
  explicit TimingOutCollectives(Transport& transport) : Collectives(Algorithm::ring, transport) {}

 protected:
  std::optional<double> execute(CollectiveOp, void*, std::size_t, DType) override {
    throw CommTimeout("NCCL: schedule did not complete in 60 s");
  }
};

struct AbortCalled {};

TEST(EngineTimeouts, ATransportsTimeoutEndsTheJobWithTheWatchdogsLineNamingTheUnit) {
  MpiTransport transport;
  TimingOutCollectives collectives(transport);
  auto backend = make_backend("cpu");
  RankGroup group = mpi_group();
  std::string message;
  group.abort = [&](const std::string& m) {
    message = m;
    throw AbortCalled{};
  };
  const ModelConfig config{.vocab = 23, .seq = 5, .layers = 2, .width = 12, .heads = 2};
  DataParallelEngine engine(config, *backend, group, EngineSettings{.bucket_mb = 0, .comm_timeout_s = 60},
                            kLocalWindows);
  engine.set_collectives(&collectives);
  EXPECT_THROW(
      {
        engine.initialise(5);
        const auto windows = pool_windows(config, 0, kLocalWindows);
        engine.step(windows.data(), kLocalWindows * std::size_t(world_size()),
                    OptimizerSettings{.lr = 1e-2, .weight_decay = 0.1, .grad_clip = 1.0});
      },
      AbortCalled);
  EXPECT_TRUE(std::regex_match(message, std::regex("[a-z_]+ on unit .+ did not complete in 60 s"))) << message;
}

}  // namespace
}  // namespace dptrain
