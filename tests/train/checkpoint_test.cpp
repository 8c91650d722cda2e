// Safetensors files and checkpoints: exact round trips, damaged files refused, no temporary files left.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "../kernels/cuda_on_cpu_backend.hpp"
#include "dptrain/core/error.hpp"
#include "dptrain/train/checkpoint.hpp"
#include "dptrain/train/checkpoint_meta.hpp"
#include "dptrain/train/option_table.hpp"
#include "dptrain/train/safetensors.hpp"
#include "test_support.hpp"

namespace dptrain {
namespace {

using testing::TemporaryDirectory;

TEST(Safetensors, RoundTripIsExactAndHeaderIsStandard) {
  TemporaryDirectory dir("st");
  std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, 7.0f};
  std::vector<bf16> b = {to_bf16(1.0f), to_bf16(-0.5f)};
  write_safetensors(dir / "x.safetensors", {{"a", "F32", {2, 3}, a.data(), 24}, {"b", "BF16", {2}, b.data(), 4}},
                    {{"format", "pt"}});
  std::ifstream in(dir / "x.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  EXPECT_EQ(header_size % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + header_size + 28);
  const auto header = nlohmann::json::parse(bytes.substr(8, header_size));
  EXPECT_EQ(header["a"]["data_offsets"], nlohmann::json({0, 24}));
  EXPECT_EQ(header["b"]["data_offsets"], nlohmann::json({24, 28}));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");

  const SafetensorsFile f = read_safetensors(dir / "x.safetensors");
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.tensors.at("a").shape, (std::vector<std::size_t>{2, 3}));
  EXPECT_EQ(std::memcmp(f.tensors.at("a").data.data(), a.data(), 24), 0);
  EXPECT_EQ(std::memcmp(f.tensors.at("b").data.data(), b.data(), 4), 0);
  // No temporary file is left beside it.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path), {}), 1);
}

TEST(Safetensors, DamagedFilesAreRefused) {
  TemporaryDirectory dir("st-bad");
  std::vector<float> a(16, 1.0f);
  write_safetensors(dir / "x.safetensors", {{"a", "F32", {16}, a.data(), 64}});
  std::ifstream in(dir / "x.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  testing::write_text(dir / "truncated.safetensors", bytes.substr(0, bytes.size() - 4));
  EXPECT_THROW(read_safetensors(dir / "truncated.safetensors"), UserError);
  testing::write_text(dir / "tiny.safetensors", bytes.substr(0, 5));
  EXPECT_THROW(read_safetensors(dir / "tiny.safetensors"), UserError);
  std::string garbled = bytes;
  garbled[9] = '#';
  testing::write_text(dir / "garbled.safetensors", garbled);
  EXPECT_THROW(read_safetensors(dir / "garbled.safetensors"), UserError);
  // A float or negative shape would be converted to std::size_t out of range (undefined behaviour): refused.
  for (const char* shape : {"[1e300]", "[-1]", "[1.5]"}) {
    std::string header = fmt::format(R"({{"a":{{"dtype":"F32","shape":{},"data_offsets":[0,4]}}}})", shape);
    header.append((8 - header.size() % 8) % 8, ' ');
    const std::uint64_t size = header.size();
    const std::string bytes = std::string(reinterpret_cast<const char*>(&size), 8) + header + std::string(4, '\0');
    try {
      parse_safetensors("f.safetensors", bytes);
      ADD_FAILURE() << shape << " accepted";
    } catch (const UserError& e) {
      EXPECT_EQ(std::string(e.what()),
                fmt::format("checkpoint file 'f.safetensors' has a damaged header: tensor 'a': 'shape' holds {}, "
                            "expected non-negative integers",
                            nlohmann::json::parse(shape)[0].dump()));
    }
  }
}

// On every backend of the build (backend_names()).
class Checkpoint : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {  // a backend of the build that cannot run here (cuda without a GPU) is skipped, named
    if (const std::string why = test::backend_under_test_unavailable(GetParam()); !why.empty()) GTEST_SKIP() << why;
  }
};

TEST_P(Checkpoint, SaveAndLoadRestoreEveryByte) {
  TemporaryDirectory dir("ckpt");
  ModelConfig config{.vocab = 13, .seq = 6, .layers = 2, .width = 8, .heads = 2};
  TrainOptions options;
  options.model = config;
  // One backend per engine: an engine reserves its backend's weight views.
  auto backend_a = test::make_backend_under_test(GetParam()), backend_b = test::make_backend_under_test(GetParam()), backend_c = test::make_backend_under_test(GetParam());
  DataParallelEngine a(config, *backend_a, RankGroup{}, EngineSettings{}, 2);
  a.initialise(3);
  std::vector<std::int32_t> windows = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0, 1};
  for (int s = 0; s < 3; ++s) a.step(windows.data(), 2, {.lr = 1e-2, .weight_decay = 0.1, .grad_clip = 1.0});
  const std::string where = save_checkpoint(dir.path.string(), a, options, 3);
  EXPECT_EQ(where, dir / "step-000003");

  DataParallelEngine b(config, *backend_b, RankGroup{}, EngineSettings{}, 2);
  b.initialise(99);
  const ResumePoint resumed = load_checkpoint(dir.path.string(), b, options);
  EXPECT_EQ(resumed.step, 3);
  EXPECT_EQ(resumed.optimizer_step, 3);
  EXPECT_EQ(resumed.meta["step"], 3);
  EXPECT_EQ(resumed.meta["optimizer_step"], 3);
  EXPECT_EQ(b.optimizer_step(), 3);
  const std::vector<bf16> wa = a.full_weights(), wb = b.full_weights();
  EXPECT_EQ(std::memcmp(wa.data(), wb.data(), wa.size() * sizeof(bf16)), 0);
  const OptimizerState sa = a.optimizer_state(), sb = b.optimizer_state();
  EXPECT_EQ(sa.master, sb.master);
  EXPECT_EQ(sa.m, sb.m);
  EXPECT_EQ(sa.v, sb.v);
  // The next step is the same on both.
  const StepResult ra = a.step(windows.data(), 2, {.lr = 1e-2, .weight_decay = 0.1, .grad_clip = 1.0});
  const StepResult rb = b.step(windows.data(), 2, {.lr = 1e-2, .weight_decay = 0.1, .grad_clip = 1.0});
  EXPECT_EQ(ra.loss, rb.loss);
  EXPECT_EQ(a.optimizer_state().master, b.optimizer_state().master);

  // Another shape is refused with a reason.
  ModelConfig wider = config;
  wider.width = 16;
  DataParallelEngine c(wider, *backend_c, RankGroup{}, EngineSettings{}, 2);
  try {
    load_checkpoint(dir.path.string(), c, options);
    ADD_FAILURE() << "a checkpoint of another shape was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("another model shape"), std::string::npos) << e.what();
  }
}

// After skipped non-finite steps the loop is ahead of the optimizer: the folder and "step" carry the loop step,
// "optimizer_step" the updates taken, and loading gives the engine the latter (AdamW's bias correction).
TEST_P(Checkpoint, LoopStepNamesTheFolderAndTheOptimizerStepIsRestored) {
  TemporaryDirectory dir("ckpt-steps");
  ModelConfig config{.vocab = 13, .seq = 6, .layers = 1, .width = 8, .heads = 2};
  TrainOptions options;
  options.model = config;
  options.steps = 10;
  options.lr = 0.02;
  auto backend_a = test::make_backend_under_test(GetParam()), backend_b = test::make_backend_under_test(GetParam());
  const OptimizerSettings optimizer{.lr = 1e-2, .weight_decay = 0.1, .grad_clip = 1.0};
  std::vector<std::int32_t> windows = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0, 1};
  DataParallelEngine a(config, *backend_a, RankGroup{}, EngineSettings{}, 2);
  a.initialise(3);
  for (int s = 0; s < 2; ++s) a.step(windows.data(), 2, optimizer);
  EXPECT_EQ(save_checkpoint(dir.path.string(), a, options, 5), dir / "step-000005");
  const auto meta = nlohmann::json::parse(testing::file_bytes(dir / "step-000005/meta.json"));
  EXPECT_EQ(meta["step"], 5);
  EXPECT_EQ(meta["optimizer_step"], 2);
  EXPECT_EQ(meta["data"]["next_step"], 5);
  EXPECT_EQ(meta["training"], checkpoint_training_section(options));
  EXPECT_EQ(meta["training"]["lr"], 0.02);
  EXPECT_EQ(meta["training"]["steps"], 10);
  EXPECT_EQ(testing::file_bytes(dir / "latest"), "step-000005\n");

  DataParallelEngine b(config, *backend_b, RankGroup{}, EngineSettings{}, 2);
  b.initialise(99);
  const ResumePoint resumed = load_checkpoint(dir.path.string(), b, options);
  EXPECT_EQ(resumed.step, 5);
  EXPECT_EQ(resumed.optimizer_step, 2);
  EXPECT_EQ(b.optimizer_step(), 2);
  // The next update uses bias correction 3 on both: bitwise the same state (step 6 would differ).
  a.step(windows.data(), 2, optimizer);
  b.step(windows.data(), 2, optimizer);
  EXPECT_EQ(a.optimizer_state().master, b.optimizer_state().master);
  EXPECT_EQ(a.optimizer_state().v, b.optimizer_state().v);

  // A checkpoint from before optimizer_step was recorded: its optimizer step is its step.
  nlohmann::json old = meta;
  old.erase("optimizer_step");
  seal_checkpoint_meta(old);
  testing::write_text(dir / "step-000005/meta.json", old.dump());
  EXPECT_EQ(load_checkpoint(dir.path.string(), b, options).optimizer_step, 5);
  EXPECT_EQ(b.optimizer_step(), 5);

  // More updates than steps cannot happen: refused with the values.
  nlohmann::json ahead = meta;
  ahead["optimizer_step"] = 6;
  seal_checkpoint_meta(ahead);
  testing::write_text(dir / "step-000005/meta.json", ahead.dump());
  try {
    load_checkpoint(dir.path.string(), b, options);
    ADD_FAILURE() << "an optimizer step beyond the loop step was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("has optimizer_step 6, expected 0 to its step 5"), std::string::npos)
        << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, Checkpoint, ::testing::ValuesIn(test::backends_under_test()),
                        [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace dptrain
