// The option table: every flag parses from the command line and from a TOML file into the field the table names,
// the roles (which options ranks may hold differently, which go into checkpoints), and the pure parts of the
// cross-rank check (which value differs first, its message) and of the MPI thread-level check.
#include <gtest/gtest.h>

#include <mpi.h>

#include <map>
#include <set>

#include "dptrain/core/error.hpp"
#include "dptrain/train/mpi_world.hpp"
#include "dptrain/train/option_table.hpp"
#include "dptrain/train/rank_agreement.hpp"
#include "test_support.hpp"

namespace dptrain {
namespace {

// A value other than the default for every option, as given on the command line and as the table's text of
// the parsed value. Flags (switches) have no value: given, they read "true".
struct Sample {
  std::string given, text;
};
const std::map<std::string, Sample>& samples() {
  static const std::map<std::string, Sample> values = {
      {"--vocab", {"300", "300"}},
      {"--seq", {"64", "64"}},
      {"--layers", {"3", "3"}},
      {"--width", {"48", "48"}},
      {"--heads", {"6", "6"}},
      {"--data", {"corpus.txt", "corpus.txt"}},
      {"--val-fraction", {"0.25", "0.25"}},
      {"--steps", {"77", "77"}},
      {"--batch", {"24", "24"}},
      {"--lr", {"2.5e-3", "0.0025"}},
      {"--min-lr", {"1e-5", "1e-05"}},
      {"--warmup", {"7", "7"}},
      {"--weight-decay", {"0.05", "0.05"}},
      {"--grad-clip", {"0.5", "0.5"}},
      {"--seed", {"42", "42"}},
      {"--skip-nonfinite", {"", "true"}},
      {"--max-skipped", {"4", "4"}},
      {"--eval-every", {"9", "9"}},
      {"--eval-windows", {"5", "5"}},
      {"--device", {"cpu", "cpu"}},
      {"--attention", {"gemm", "gemm"}},
      {"--matmul-epilogues", {"composed", "composed"}},
      {"--cpu-gemm", {"onednn", "onednn"}},
      {"--allreduce", {"tree", "tree"}},
      {"--grad-dtype", {"fp32", "fp32"}},
      {"--check-every", {"3", "3"}},
      {"--zero", {"2", "2"}},
      {"--bucket-mb", {"0.5", "0.5"}},
      {"--no-overlap", {"", "true"}},
      {"--overlap", {"off", "off"}},
      {"--grad-accum", {"4", "4"}},
      {"--link", {"ib-400g", "ib-400g"}},
      {"--comm-timeout", {"7.5", "7.5"}},
      {"--nccl-blocking", {"", "true"}},
      {"--peak-tflops", {"1.5", "1.5"}},
      {"--threads", {"3", "3"}},
      {"--log", {"run.jsonl", "run.jsonl"}},
      {"--trace", {"trace.json", "trace.json"}},
      {"--save", {"ckpt", "ckpt"}},
      {"--save-every", {"10", "10"}},
      {"--resume", {"old", "old"}},
      {"--quiet", {"", "true"}},
      {"--overwrite", {"", "true"}},
      {"--keep-last", {"3", "3"}},
      {"--op-times", {"", "true"}},
  };
  return values;
}

TrainOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), "dptrain");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  const auto options = parse_train_options(int(argv.size()), argv.data(), false);
  EXPECT_TRUE(options.has_value());
  return options.value_or(TrainOptions{});
}

TEST(OptionTable, EveryFlagHasASampleAndParsesFromTheCommandLine) {
  const auto& table = train_option_table();
  ASSERT_EQ(table.size(), samples().size()) << "a flag was added or removed: give it a sample above";
  std::vector<std::string> args;
  for (const TrainOption& option : table) {
    ASSERT_TRUE(samples().count(option.flag)) << option.flag << " has no sample";
    args.push_back(option.flag);
    if (!samples().at(option.flag).given.empty()) args.push_back(samples().at(option.flag).given);
  }
  const TrainOptions parsed = parse(args);
  const TrainOptions defaults;
  for (const TrainOption& option : table) {
    EXPECT_EQ(option.text(parsed), samples().at(option.flag).text) << option.flag;
    EXPECT_NE(option.text(parsed), option.text(defaults)) << option.flag << ": the sample is the default";
  }
  // The table writes into the fields the rest of the program reads.
  EXPECT_EQ(parsed.model.heads, 6);
  EXPECT_EQ(parsed.lr, 2.5e-3);
  EXPECT_EQ(parsed.grad_dtype, DType::f32);
  EXPECT_EQ(parsed.seed, 42u);
  EXPECT_TRUE(parsed.no_overlap);
  EXPECT_EQ(parsed.resume, "old");
  EXPECT_TRUE(parsed.overwrite);
  EXPECT_EQ(parsed.keep_last, 3);
}

TEST(OptionTable, EveryFlagParsesFromATomlConfig) {
  testing::TemporaryDirectory dir("options-toml");
  std::string toml;
  for (const TrainOption& option : train_option_table()) {
    const Sample& sample = samples().at(option.flag);
    const std::string key = option.flag.substr(2);
    const bool number = !sample.given.empty() && sample.given.find_first_not_of("0123456789.e-") == std::string::npos;
    toml += key + " = " + (sample.given.empty() ? "true" : number ? sample.given : "\"" + sample.given + "\"") + "\n";
  }
  testing::write_text(dir / "all.toml", toml);
  const TrainOptions parsed = parse({"--config", dir / "all.toml", "--steps", "5"});  // a later flag wins
  for (const TrainOption& option : train_option_table())
    EXPECT_EQ(option.text(parsed), option.flag == "--steps" ? "5" : samples().at(option.flag).text) << option.flag;
}

TEST(OptionTable, OnlyOptionsThatChangeNothingSharedMayDifferAcrossRanks) {
  std::set<std::string> per_rank;
  for (const TrainOption& option : train_option_table())
    if (option.agreement == Agreement::per_rank) per_rank.insert(option.flag);
  // --data and --device are agreed on in another form by the trainer: the tokens' hash, the device it resolves to.
  EXPECT_EQ(per_rank,
            (std::set<std::string>{"--data", "--device", "--threads", "--log", "--quiet", "--comm-timeout",
                                   "--op-times"}));

  TrainOptions options;
  options.save = "ckpt";
  const std::vector<AgreedValue> shared = values_every_rank_shares(options);
  ASSERT_EQ(shared.size(), train_option_table().size() - 7);
  EXPECT_EQ(shared.front().name, "--vocab");
  EXPECT_EQ(shared.front().text, "256");
  const auto save = std::find_if(shared.begin(), shared.end(), [](const AgreedValue& v) { return v.name == "--save"; });
  ASSERT_NE(save, shared.end());
  EXPECT_EQ(save->printed(), "ckpt");
}

TEST(OptionTable, CheckpointSectionHoldsTheTrainingSettings) {
  TrainOptions options;
  options.lr = 0.002;
  options.grad_dtype = DType::f32;
  options.skip_nonfinite = true;
  const nlohmann::json section = checkpoint_training_section(options);
  const nlohmann::json expected = {
      {"val_fraction", 0.1}, {"steps", 200},           {"batch", 16},          {"lr", 0.002},
      {"min_lr", 1e-4},      {"warmup", 20},           {"weight_decay", 0.1},  {"grad_clip", 1.0},
      {"seed", 1337},        {"skip_nonfinite", true}, {"max_skipped", 10},    {"eval_every", 50},
      {"eval_windows", 32},  {"allreduce", "ring"},    {"grad_dtype", "fp32"}, {"zero", 0},
      {"bucket_mb", 25.0},   {"overlap", "auto"},      {"grad_accum", 1}};
  EXPECT_EQ(section, expected) << section.dump();
}

TEST(OptionTable, KeysAreFlagNamesWithUnderscores) {
  TrainOption option;
  option.flag = "--min-lr";
  EXPECT_EQ(option.key(), "min_lr");
  option.flag = "--steps";
  EXPECT_EQ(option.key(), "steps");
}

TEST(RankAgreement, FirstDifferingValueAndRank) {
  // 3 ranks × 4 values, rank-major.
  const std::vector<std::uint64_t> same = {1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4};
  EXPECT_FALSE(first_difference(same, 4, 3).has_value());
  // Rank 2 differs in value 1, rank 1 in value 3: value 1 comes first in the list.
  const std::vector<std::uint64_t> hashes = {1, 2, 3, 4, 1, 2, 3, 9, 1, 7, 3, 4};
  const auto difference = first_difference(hashes, 4, 3);
  ASSERT_TRUE(difference.has_value());
  EXPECT_EQ(difference->value, 1u);
  EXPECT_EQ(difference->rank, 2);
  // Two ranks differing in the same value: the lower rank is named.
  const auto both = first_difference({5, 6, 6}, 1, 3);
  ASSERT_TRUE(both.has_value());
  EXPECT_EQ(both->rank, 1);
  EXPECT_FALSE(first_difference({5}, 1, 1).has_value());  // one rank always agrees
}

TEST(RankAgreement, MessageNamesOptionRankAndBothValues) {
  EXPECT_EQ(difference_message("--save", 1, "b", "a"),
            "rank 1: --save is 'b' but rank 0 has 'a': every rank must be started with the same options");
}

TEST(MpiThreadLevel, AnythingBelowMultipleIsRefusedNamingTheLevel) {
  EXPECT_FALSE(thread_support_problem(MPI_THREAD_MULTIPLE).has_value());
  const auto serialized = thread_support_problem(MPI_THREAD_SERIALIZED);
  ASSERT_TRUE(serialized.has_value());
  EXPECT_EQ(*serialized,
            "the MPI library provides only MPI_THREAD_SERIALIZED but dptrain needs MPI_THREAD_MULTIPLE (its "
            "communication thread calls MPI while the main thread may): use an MPI library built with "
            "MPI_THREAD_MULTIPLE support");
  EXPECT_NE(thread_support_problem(MPI_THREAD_FUNNELED).value_or("").find("only MPI_THREAD_FUNNELED but"),
            std::string::npos);
  EXPECT_NE(thread_support_problem(MPI_THREAD_SINGLE).value_or("").find("only MPI_THREAD_SINGLE but"),
            std::string::npos);
}

}  // namespace
}  // namespace dptrain
