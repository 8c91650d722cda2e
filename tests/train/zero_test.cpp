// ZeRO stages 0–3 end to end under mpiexec (ring, fp32 wire unless said otherwise): every stage, with overlap on
// or off, trains bitwise the same model at a given world size; the summary's memory per rank is exactly what the
// padded units hold and within the padding of docs/systems-model.md's formula; the bytes each rank sends per step are
// exactly the padded formula; checkpoints resume at another world size and stage; tree and native agree with the
// ring.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "test_support.hpp"

namespace dptrain {
namespace {

using testing::file_bytes;
using testing::max_relative_difference;

using RunResult = testing::LoggedRun;

std::vector<double> tail(const std::vector<double>& v, std::size_t from) {
  return from <= v.size() ? std::vector<double>(v.begin() + std::ptrdiff_t(from), v.end()) : std::vector<double>{};
}

constexpr const char* kExact = "--grad-dtype fp32 --allreduce ring ";

class ZeroStages : public testing::TinyRunTest {
 protected:
  ZeroStages() : TinyRunTest("zero", "--quiet --peak-tflops 1 --link alpha=10us,bw=1GB/s --check-every 1 ") {}

  // A run of `ranks` ranks, logged; `logged` = the step records expected (fewer than --steps after a resume).
  RunResult run(int ranks, const std::string& flags, std::size_t logged) {
    const std::string log = dir_ / fmt::format("run-{}.jsonl", counter_++);
    const std::string command = testing::mpiexec(ranks) + " " + dptrain("--log " + log + " " + flags);
    RunResult result = testing::run_logged(command, log);
    EXPECT_EQ(result.losses.size(), logged) << command << "\n" << result.output;
    return result;
  }
  int counter_ = 0;
};

// What the summary must say for a run: memory exactly as the engine holds it over the padded units, within the
// padding of the formula over the unpadded Ψ = N, and the bytes sent per step exactly the padded formula.
void check_memory_and_bytes(const nlohmann::json& summary, int stage, int world, double grad_bytes) {
  SCOPED_TRACE(fmt::format("stage {}, {} ranks, {} B gradient", stage, world, grad_bytes));
  const double N = summary["parameters"].get<double>(), d = world;
  double P = 0;  // padded_total: Σ of the padded units
  for (const auto& unit : summary["units"]) {
    const std::size_t padded = unit["padded"], elements = unit["elements"];
    EXPECT_EQ(padded % (std::size_t(world) * 32), 0u) << unit.dump();
    EXPECT_GE(padded, elements);
    EXPECT_LT(padded - elements, std::size_t(world) * 32) << unit.dump();
    P += double(padded);
  }
  const double shard = P / d, units = double(summary["units"].size());
  EXPECT_EQ(summary["zero"].get<int>(), stage);
  EXPECT_EQ(summary["ranks"].get<int>(), world);
  const nlohmann::json& memory = summary["memory"];
  struct Category {
    const char* name;
    double per_element;   // bytes
    bool sharded;         // at this stage
  };
  const Category categories[] = {{"weights", 2, stage == 3}, {"gradients", grad_bytes, stage >= 2},
                                 {"optimizer", 12, stage >= 1}};
  for (const Category& c : categories) {
    SCOPED_TRACE(c.name);
    const nlohmann::json& row = memory.at(c.name);
    // Measured: what the engine allocated (stage 0 keeps the optimizer state and stages 0–2 the weights over the
    // N real elements; the gradient is held over the padded units).
    double expected_measured = 0;
    if (std::string(c.name) == "gradients")
      expected_measured = c.per_element * (c.sharded ? shard : P);
    else
      expected_measured = c.per_element * (c.sharded ? shard : N);
    EXPECT_EQ(row["measured"].get<double>(), expected_measured);
    EXPECT_EQ(row["measured_max_rank"].get<double>(), expected_measured);  // every rank holds the same
    // Modelled: docs/systems-model.md over Ψ = N, sharded = divided by d.
    const double modelled = c.per_element * (c.sharded ? N / d : N);
    EXPECT_DOUBLE_EQ(row["modelled"].get<double>(), modelled);
    // The padding: at most world·32 − 1 elements per unit, of which a rank holds 1/d when sharded.
    const double slack = row["measured"].get<double>() - row["modelled"].get<double>();
    const double bound = c.per_element * units * (d * 32 - 1) / (c.sharded ? d : 1.0);
    EXPECT_GE(slack, -1e-9 * modelled);
    EXPECT_LE(slack, bound);
  }
  // The categories outside the formula: reported for this rank and the largest rank.
  for (const char* name : {"communication_buffers", "activations", "working_copies", "peak_resident"}) {
    const nlohmann::json& row = memory.at(name);
    // Every category but the staging buffers (empty at stage 0, checked below) holds something.
    if (std::string(name) != "communication_buffers") {
      EXPECT_GT(row.at("measured").get<double>(), 0.0) << name;
    }
    EXPECT_GE(row.at("measured_max_rank").get<double>(), row.at("measured").get<double>()) << name;
    EXPECT_FALSE(row.contains("modelled")) << name;
  }
  // The cpu backend's working copies: the fp32 gradient accumulator [N] and its fp32 views of the weights: the
  // whole model [N] at stages 0–2; at stage 3 two views of the largest unit (the embeddings, held for the tied
  // head, and the unit in use), so the weights of the units in flight only.
  double largest_unit = 0;
  for (const auto& unit : summary["units"]) largest_unit = std::max(largest_unit, unit["elements"].get<double>());
  EXPECT_EQ(memory["working_copies"]["measured"].get<double>(), 4 * N + (stage == 3 ? 8 * largest_unit : 4 * N));
  EXPECT_GT(memory["activations"]["measured"].get<double>(), 0.0);
  // Stage 0 all-reduces in place; the other stages stage the weights they all-gather.
  if (stage == 0) {
    EXPECT_EQ(memory["communication_buffers"]["measured"].get<double>(), 0.0);
  } else if (world > 1) {
    EXPECT_GT(memory["communication_buffers"]["measured"].get<double>(), 0.0);
  }
  EXPECT_TRUE(summary["hidden_comm_fraction"].contains("measured"));
  EXPECT_TRUE(summary["hidden_comm_fraction"].contains("modelled"));
  // Bytes per rank and step on the ring: all-reduce 2(d−1)/d·g·P; reduce-scatter (d−1)/d·g·P plus an all-gather
  // of BF16 weights (d−1)/d·2·P once (stages 1, 2) or twice (stage 3) per micro-step.
  const int accum = summary["grad_accum"];
  const double r = (d - 1) / d;
  double padded_bytes = stage == 0 ? 2 * r * grad_bytes * P : r * (grad_bytes + 2) * P;
  if (stage == 3) padded_bytes += r * 2 * P + 2.0 * (accum - 1) * r * 2 * P;
  const nlohmann::json& bytes = summary["bytes_sent_per_step"];
  EXPECT_DOUBLE_EQ(bytes["modelled_padded"].get<double>(), padded_bytes);
  EXPECT_EQ(bytes["measured"].get<double>(), bytes["modelled_padded"].get<double>());
  EXPECT_DOUBLE_EQ(bytes["modelled"].get<double>(), padded_bytes * N / P);
}

class ZeroStagesAtRanks : public ZeroStages, public ::testing::WithParamInterface<int> {};

// Stages 0–3, overlap on and off: the same collectives add the same partial sums in the same order (stage 0's
// all-reduce is the ring reduce-scatter followed by an all-gather; stages 1–3 reduce-scatter and update the own
// slices with the same AdamW), so the losses are bitwise equal. Against one rank only the order of the fp32
// additions differs.
TEST_P(ZeroStagesAtRanks, StagesAndOverlapAgreeBitwiseAndTheSummaryIsExact) {
  const int world = GetParam();
  const std::string common = fmt::format("{} --batch 12 --steps 6 --bucket-mb 0", kExact);
  std::vector<double> reference;
  std::size_t padded_total = 0;
  for (int stage = 0; stage <= 3; ++stage) {
    for (bool overlap : {true, false}) {
      SCOPED_TRACE(fmt::format("stage {} overlap {}", stage, overlap ? "on" : "off"));
      const RunResult r =
          run(world, fmt::format("{} --zero {}{}", common, stage, overlap ? " --overlap on" : " --no-overlap"), 6);
      if (reference.empty()) {
        reference = r.losses;
        for (const auto& unit : r.summary["units"]) padded_total += unit["padded"].get<std::size_t>();
      }
      EXPECT_EQ(r.losses, reference);
      EXPECT_EQ(r.summary["overlap"], overlap);
      check_memory_and_bytes(r.summary, stage, world, 4);
    }
  }
  // The padded totals by hand (--bucket-mb 0: final norm 64, blocks of 12,704, embeddings 8,704, each padded to a
  // multiple of world·32): 34,176 + {0, 64, 192, 256} for 1–4 ranks.
  const std::size_t expected_padded[] = {0, 34176, 34240, 34368, 34432};
  EXPECT_EQ(padded_total, expected_padded[world]);
  if (world > 1) {
    const RunResult one = run(1, fmt::format("{} --zero 0", common), 6);
    // Measured over these 6 steps: 4.1e-9 (2 ranks), 1.5e-8 (3), 2.0e-9 (4) relative; asserted below 1e-6 (the
    // 30-step test in data_parallel_test.cpp allows 1e-5). A rank's gradient missing or counted twice moves the
    // loss by percents.
    const double difference = max_relative_difference(reference, one.losses);
    std::printf("max relative loss difference, %d ranks against 1: %.3g\n", world, difference);
    EXPECT_LT(difference, 1e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, ZeroStagesAtRanks, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return fmt::format("W{}", info.param); });

// With the BF16 wire too, each rank sends exactly the padded formula: stage 3 sends 1.5 times stage 0
// ((2 + 4)/(2·2)), and each further micro-step of stage 3 gathers the weights twice more.
TEST_F(ZeroStages, Bf16BytesSentEqualThePaddedFormula) {
  std::vector<double> measured;
  for (int stage = 0; stage <= 3; ++stage) {
    const RunResult r = run(3, fmt::format("--grad-dtype bf16 --batch 12 --steps 2 --bucket-mb 0 --zero {}", stage), 2);
    check_memory_and_bytes(r.summary, stage, 3, 2);
    measured.push_back(r.summary["bytes_sent_per_step"]["measured"].get<double>());
  }
  EXPECT_EQ(measured[3], 1.5 * measured[0]);
  EXPECT_EQ(measured[1], measured[2]);
  // (d−1)/d·2·P with P = 34,368 at 3 ranks: 45,824 bytes per all-gather or BF16 reduce-scatter.
  EXPECT_EQ(measured[0], 2 * 45824.0);
  EXPECT_EQ(measured[3], 3 * 45824.0);
  for (int stage : {0, 3}) {
    const RunResult r =
        run(3, fmt::format("--grad-dtype bf16 --batch 12 --steps 2 --bucket-mb 0 --zero {} --grad-accum 2", stage), 2);
    check_memory_and_bytes(r.summary, stage, 3, 2);
    EXPECT_EQ(r.summary["bytes_sent_per_step"]["measured"].get<double>(), stage == 0 ? measured[0] : 5 * 45824.0);
  }
}

std::string set_latest(const std::string& dir, int step) {
  const std::string name = fmt::format("step-{:06d}", step);
  EXPECT_TRUE(std::filesystem::is_directory(dir + "/" + name)) << dir << "/" << name;
  testing::write_text(dir + "/latest", name + "\n");
  return dir + "/" + name;
}

// 8 steps uninterrupted at 2 ranks, stage 0, against: stage 2 at 2 ranks saving at step 4 (and 8), resumed at 3
// ranks stage 3 (saving at step 6), resumed from that at 4 ranks stage 1; and the stage-2 checkpoint resumed at 2
// ranks stage 2, which must continue bit for bit. --save-every keeps the learning-rate schedule of the 8-step run;
// `latest` is pointed back at the middle checkpoint.
TEST_F(ZeroStages, ResumeAtAnotherWorldSizeAndStage) {
  const std::string common = fmt::format("{} --batch 12 --steps 8 --bucket-mb 0", kExact);
  const std::string u = dir_ / "u";
  const RunResult uninterrupted = run(2, common + " --zero 0 --save " + u, 8);
  // Stage 0: one optimizer file for all ranks.
  EXPECT_TRUE(std::filesystem::exists(u + "/step-000008/optimizer.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(u + "/step-000008/optimizer-00000-of-00002.safetensors"));
  const std::string a = dir_ / "a";
  const RunResult stage2 = run(2, common + " --zero 2 --save-every 4 --save " + a, 8);
  EXPECT_EQ(stage2.losses, uninterrupted.losses);  // same world size: bitwise
  const std::string a4 = set_latest(a, 4);
  for (int r = 0; r < 2; ++r)
    EXPECT_TRUE(std::filesystem::exists(fmt::format("{}/optimizer-{:05d}-of-00002.safetensors", a4, r))) << r;
  EXPECT_TRUE(std::filesystem::exists(a4 + "/model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(a4 + "/meta.json"));

  // 2 ranks stage 2 → 3 ranks stage 3, steps 5–8.
  const std::string b = dir_ / "b";
  const RunResult three = run(3, common + " --zero 3 --resume " + a + " --save-every 2 --save " + b, 4);
  EXPECT_EQ(three.steps, (std::vector<int>{5, 6, 7, 8}));
  const double three_difference = max_relative_difference(three.losses, tail(uninterrupted.losses, 4));
  std::printf("resumed at 3 ranks stage 3: max relative loss difference %.3g\n", three_difference);
  EXPECT_LT(three_difference, 1e-5);
  const std::string b6 = set_latest(b, 6);
  for (int r = 0; r < 3; ++r)
    EXPECT_TRUE(std::filesystem::exists(fmt::format("{}/optimizer-{:05d}-of-00003.safetensors", b6, r))) << r;

  // 3 ranks stage 3 → 4 ranks stage 1, steps 7–8.
  const RunResult four = run(4, common + " --zero 1 --resume " + b, 2);
  EXPECT_EQ(four.steps, (std::vector<int>{7, 8}));
  const double four_difference = max_relative_difference(four.losses, tail(uninterrupted.losses, 6));
  std::printf("resumed at 4 ranks stage 1: max relative loss difference %.3g\n", four_difference);
  EXPECT_LT(four_difference, 1e-5);

  // Same world size and stage: bitwise, down to the weights and every optimizer shard at step 8.
  const std::string c = dir_ / "c";
  const RunResult same = run(2, common + " --zero 2 --resume " + a + " --save " + c, 4);
  EXPECT_EQ(same.losses, tail(stage2.losses, 4));
  EXPECT_TRUE(file_bytes(c + "/step-000008/model.safetensors") == file_bytes(a + "/step-000008/model.safetensors"));
  for (int r = 0; r < 2; ++r) {
    const std::string shard = fmt::format("/step-000008/optimizer-{:05d}-of-00002.safetensors", r);
    EXPECT_TRUE(file_bytes(c + shard) == file_bytes(a + shard)) << shard;
  }
}

// Tree and native reduce-scatter and all-gather too: stages 2 and 3 at 3 ranks train as the ring does, to
// rounding (they may add the ranks' partial gradients in another order). Measured over 6 steps: tree 1.6e-8
// (loss) and 3.4e-8 (gradient norm) relative; Open MPI's reduce-scatter happened to give the ring's bits. The BF16
// weights, and so the losses, hide such differences for the first steps; the fp32 gradient norm shows them.
TEST_F(ZeroStages, TreeAndNativeMatchTheRingAtStagesTwoAndThree) {
  const std::string common = "--grad-dtype fp32 --batch 12 --steps 6 --bucket-mb 0";
  const RunResult ring = run(3, std::string(common) + " --allreduce ring --zero 2", 6);
  for (const char* algorithm : {"tree", "native"}) {
    for (int stage : {2, 3}) {
      SCOPED_TRACE(fmt::format("{} stage {}", algorithm, stage));
      const RunResult r = run(3, fmt::format("{} --allreduce {} --zero {}", common, algorithm, stage), 6);
      const double difference = max_relative_difference(r.losses, ring.losses);
      const double norm_difference = max_relative_difference(r.grad_norms, ring.grad_norms);
      std::printf("%s stage %d against the ring: max relative difference %.3g (loss), %.3g (gradient norm)\n",
                  algorithm, stage, difference, norm_difference);
      EXPECT_LT(difference, 1e-5);
      EXPECT_LT(norm_difference, 1e-5);
      EXPECT_GT(r.summary["bytes_sent_per_step"]["measured"].get<double>(), 0.0);
    }
  }
}

// The tree's all-reduce (stage 0) sends, from rank 0, its root, the whole padded gradient to each of its children:
// 2M from 3 ranks on (the systems model's figure), M at 2 ranks; the rank that sends the most is an inner rank
// with two children from 5 ranks on (M up, M to each child: 3M). For the tree's reduce-scatter and all-gather
// (stages 1-3) the model has no formula, and the summary says so rather than print the ring's.
TEST_F(ZeroStages, TheTreesBytesAreItsRootsAndOnlyItsAllReduceIsModelled) {
  for (int ranks : {2, 3, 4, 5}) {
    SCOPED_TRACE(fmt::format("{} ranks", ranks));
    const RunResult r = run(ranks, "--grad-dtype fp32 --batch 60 --steps 2 --allreduce tree --zero 0", 2);
    const nlohmann::json& bytes = r.summary["bytes_sent_per_step"];
    double padded = 0;
    for (const auto& unit : r.summary["units"]) padded += unit["padded"].get<double>();
    const double M = 4 * padded;  // fp32
    EXPECT_EQ(bytes["modelled_padded"].get<double>(), std::min(ranks - 1, 2) * M);
    EXPECT_EQ(bytes["measured"].get<double>(), bytes["modelled_padded"].get<double>());
    EXPECT_EQ(bytes["measured_max_rank"].get<double>(), (ranks >= 5 ? 3 : std::min(ranks - 1, 2)) * M);
  }
  const RunResult sharded = run(3, "--grad-dtype fp32 --batch 12 --steps 2 --allreduce tree --zero 1", 2);
  EXPECT_TRUE(sharded.summary["bytes_sent_per_step"]["modelled"].is_null()) << sharded.summary.dump();
  // Their times are modelled as the ring's, and the rows say so.
  for (const auto& row : sharded.summary["collectives"])
    EXPECT_EQ(row.value("modelled_as", std::string()), row["op"] == "all_reduce" ? "" : "ring") << row.dump();
  EXPECT_GT(sharded.summary["bytes_sent_per_step"]["measured"].get<double>(), 0.0);
}

}  // namespace
}  // namespace dptrain
