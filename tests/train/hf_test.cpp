// dptrain's checkpoints in the Hugging Face tools, with the real packages from PyPI (scripts/python-env.sh, run by
// ctest as the fixture `python_env`): a checkpoint written by `dptrain --save` reads back through the `safetensors`
// package bit for bit, and scripts/export_hf.py turns it into a folder that transformers' GPT2LMHeadModel loads
// without complaint and that gives dptrain's loss on the same windows.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

#include "dptrain/compute/backend.hpp"
#include "dptrain/compute/gpt.hpp"
#include "dptrain/core/memory.hpp"
#include "dptrain/model/layout.hpp"
#include "dptrain/train/safetensors.hpp"
#include "test_support.hpp"

namespace dptrain {
namespace {

namespace fs = std::filesystem;
using testing::run_command;

const fs::path kPythonEnv = DPTRAIN_PYTHON_ENV;  // made by scripts/python-env.sh
constexpr int kSteps = 3;

std::string to_hex(const std::vector<char>& bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * bytes.size());
  for (char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    hex += digits[b >> 4];
    hex += digits[b & 15];
  }
  return hex;
}

class HuggingFaceInterop : public testing::TinyRunTest {
 protected:
  HuggingFaceInterop() : TinyRunTest("hf", "--quiet ") {}

  std::string python() const { return (kPythonEnv / "bin" / "python").string(); }
  std::string check_script() const { return testing::source_dir() + "/tests/train/hf_check.py"; }

  // Trains kSteps steps of the tiny config and saves; the step folder and the model it holds.
  void train_and_save() {
    ASSERT_TRUE(fs::exists(python()))
        << python() << " is missing: scripts/python-env.sh makes it (ctest runs it first as the test python_env; "
        << "alone: scripts/python-env.sh " << kPythonEnv.string() << ")";
    const auto r = run_command(dptrain(fmt::format("--steps {} --save {}", kSteps, dir_ / "ckpt")));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    step_ = fs::path(dir_ / "ckpt") / fmt::format("step-{:06d}", kSteps);
    ASSERT_TRUE(fs::exists(step_ / "model.safetensors")) << r.output;
    const auto meta = nlohmann::json::parse(testing::file_bytes((step_ / "meta.json").string()));
    config_.vocab = meta.at("model").at("vocab");
    config_.seq = meta.at("model").at("seq");
    config_.layers = meta.at("model").at("layers");
    config_.width = meta.at("model").at("width");
    config_.heads = meta.at("model").at("heads");
  }

  nlohmann::json run_json(const std::string& command) {
    const auto r = run_command("(" + command + " 2>" + (dir_ / "stderr.txt") + ")");  // stdout: the JSON alone
    EXPECT_EQ(r.exit_code, 0) << command << "\n" << r.output << testing::file_bytes(dir_ / "stderr.txt");
    if (r.exit_code != 0) return {};
    try {
      return nlohmann::json::parse(r.output);
    } catch (const nlohmann::json::exception& e) {
      ADD_FAILURE() << command << " printed no JSON (" << e.what() << "):\n" << r.output;
      return {};
    }
  }

  // scripts/export_hf.py with `args`: its exit code and output.
  testing::CommandResult export_hf(const std::string& args) const {
    return run_command(fmt::format("{} {}/scripts/export_hf.py {}", python(), testing::source_dir(), args));
  }

  // A refusal: exit 2 and one line `export_hf: ...` that holds `expected` (never a traceback).
  static void expect_refused(const testing::CommandResult& r, const std::string& expected) {
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(r.output.starts_with("export_hf: ")) << r.output;
    EXPECT_EQ(testing::occurrences(r.output, "\n"), 1) << "not one line:\n" << r.output;
    EXPECT_NE(r.output.find(expected), std::string::npos) << "expected '" << expected << "' in: " << r.output;
  }

  // A copy of the step folder, to damage.
  fs::path copy_of_step(const std::string& name) const {
    const fs::path copy = fs::path(dir_.path) / name;
    fs::copy(step_, copy, fs::copy_options::recursive);
    return copy;
  }

  fs::path step_;
  ModelConfig config_;
};

// Every file under `root` (relative name → bytes; folders as "<folder>").
std::map<std::string, std::string> tree_bytes(const fs::path& root) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(root))
    files[fs::relative(entry.path(), root).string()] =
        entry.is_regular_file() ? testing::file_bytes(entry.path().string()) : "<folder>";
  return files;
}

// Every tensor as the safetensors package reads it — its Rust parser (safe_open for names, dtypes and shapes,
// deserialize for the bytes) and, where torch imports, safetensors.torch.load_file, the call the README names —
// is the tensor dptrain's layout describes and dptrain's own reader returns: names, BF16, shapes, every byte.
TEST_F(HuggingFaceInterop, SafetensorsPackageReadsCheckpointBitForBit) {
  ASSERT_NO_FATAL_FAILURE(train_and_save());
  const ParameterLayout layout(config_);
  const fs::path model = step_ / "model.safetensors";
  const SafetensorsFile ours = read_safetensors(model.string());
  ASSERT_EQ(ours.tensors.size(), layout.entries().size());

  const auto result = run_json(fmt::format("{} {} read {}", python(), check_script(), model.string()));
  ASSERT_TRUE(result.is_object());
  EXPECT_EQ(result.at("metadata").value("format", ""), "pt");
  const auto& readers = result.at("readers");
  ASSERT_TRUE(readers.contains("safe_open+deserialize"));
  std::vector<std::string> used;
  for (const auto& [reader, tensors] : readers.items()) {
    SCOPED_TRACE(reader + " of safetensors " + result.at("safetensors_version").get<std::string>());
    used.push_back(reader);
    std::set<std::string> names;
    for (const auto& [name, value] : tensors.items()) names.insert(name);
    std::set<std::string> expected;
    for (const auto& e : layout.entries()) expected.insert(e.name);
    EXPECT_EQ(names, expected);
    std::size_t compared = 0;
    for (const auto& e : layout.entries()) {
      if (!tensors.contains(e.name)) continue;
      const auto& t = tensors.at(e.name);
      const TensorRead& mine = ours.tensors.at(e.name);
      EXPECT_EQ(t.at("dtype"), "BF16") << e.name;
      EXPECT_EQ(mine.dtype, "BF16") << e.name;
      EXPECT_EQ(t.at("shape").get<std::vector<std::size_t>>(), e.shape) << e.name;
      EXPECT_EQ(mine.shape, e.shape) << e.name;
      ASSERT_EQ(mine.data.size(), 2 * e.numel) << e.name;
      const std::string theirs = t.at("hex");
      EXPECT_EQ(theirs.size(), 4 * e.numel) << e.name;
      EXPECT_TRUE(theirs == to_hex(mine.data)) << e.name << ": the bytes differ from dptrain's reader";
      compared += e.numel;
    }
    EXPECT_EQ(compared, layout.total());
  }
  std::printf("compared %zu BF16 values in %zu tensors through: %s\n", layout.total(), layout.entries().size(),
              fmt::format("{}", fmt::join(used, ", ")).c_str());
  if (!readers.contains("safetensors.torch.load_file"))
    std::printf("torch does not import, so safetensors.torch.load_file was not tried (apt-get install python3-torch)\n");
}

// scripts/export_hf.py's folder loads in GPT2LMHeadModel.from_pretrained with nothing missing, unexpected or
// reshaped, and its fp32 loss on windows of the corpus is dptrain's (the cpu backend on the checkpoint's weights).
TEST_F(HuggingFaceInterop, ExportLoadsInTransformersWithDptrainsLoss) {
  const fs::path unavailable = kPythonEnv / "transformers-unavailable.txt";
  if (fs::exists(unavailable)) GTEST_SKIP() << testing::file_bytes(unavailable.string());
  ASSERT_NO_FATAL_FAILURE(train_and_save());
  const ParameterLayout layout(config_);
  const std::size_t Q = config_.seq, N = layout.total();

  // Exported from the checkpoint directory (through its `latest`).
  const std::string out = dir_ / "hf";
  const auto exported = run_command(fmt::format("{} {}/scripts/export_hf.py {} {}", python(), testing::source_dir(),
                                                dir_ / "ckpt", out));
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  const auto config = nlohmann::json::parse(testing::file_bytes(out + "/config.json"));
  EXPECT_EQ(config.at("model_type"), "gpt2");
  EXPECT_EQ(config.at("n_layer"), config_.layers);
  EXPECT_EQ(config.at("n_head"), config_.heads);
  EXPECT_EQ(config.at("n_embd"), config_.width);
  EXPECT_EQ(config.at("n_positions"), config_.seq);
  EXPECT_EQ(config.at("vocab_size"), config_.vocab);
  EXPECT_EQ(config.at("activation_function"), "gelu_new");
  EXPECT_EQ(config.at("layer_norm_epsilon"), 1e-5);
  EXPECT_EQ(config.at("tie_word_embeddings"), true);

  // Windows of Q + 1 tokens (bytes) from the corpus, spread over it.
  const std::string corpus = testing::file_bytes(dir_ / "corpus.txt");
  constexpr std::size_t n = 8;
  std::vector<std::int32_t> windows;
  for (std::size_t w = 0; w < n; ++w)
    for (std::size_t t = 0; t <= Q; ++t)
      windows.push_back(static_cast<unsigned char>(corpus[w * (corpus.size() - Q - 1) / n + t]));
  std::ofstream(dir_ / "windows.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(windows.data()), std::streamsize(4 * windows.size()));

  const auto hf = run_json(fmt::format("{} {} loss {} {}", python(), check_script(), out, dir_ / "windows.bin"));
  ASSERT_TRUE(hf.is_object());
  SCOPED_TRACE(fmt::format("transformers {}, torch {}", hf.at("transformers_version").get<std::string>(),
                           hf.at("torch_version").get<std::string>()));
  EXPECT_EQ(hf.at("missing_keys"), nlohmann::json::array());
  EXPECT_EQ(hf.at("unexpected_keys"), nlohmann::json::array());
  EXPECT_EQ(hf.at("mismatched_keys"), nlohmann::json::array());
  EXPECT_EQ(hf.at("error_msgs"), nlohmann::json::array());
  EXPECT_EQ(hf.at("warnings"), nlohmann::json::array()) << "from_pretrained warned";
  EXPECT_EQ(hf.at("tied"), true) << "lm_head is not tied to wte";
  EXPECT_EQ(hf.at("logits_dtype"), "torch.float32");
  ASSERT_EQ(hf.at("windows"), n);

  // dptrain's loss: the checkpoint's BF16 weights in the flat layout, one forward on the cpu backend.
  const SafetensorsFile file = read_safetensors((step_ / "model.safetensors").string());
  std::vector<char> flat(2 * N);
  for (const auto& e : layout.entries()) {
    const TensorRead& t = file.tensors.at(e.name);
    ASSERT_EQ(t.data.size(), 2 * e.numel) << e.name;
    std::memcpy(flat.data() + 2 * e.offset, t.data.data(), t.data.size());
  }
  auto backend = make_backend("cpu");
  Device& device = backend->device();
  Buffer weights(device, flat.size()), loss_sum(device, sizeof(double));
  device.upload(weights.data(), flat.data(), flat.size());
  device.zero(loss_sum.data(), sizeof(double));
  backend->reserve_weight_views(N, 1);
  const void* view = backend->acquire_weights(weights.as<bf16>(), N);
  Gpt gpt(layout, *backend, n);
  gpt.forward(windows.data(), n, whole_weights(view, backend->weight_dtype()), loss_sum.as<double>());
  device.synchronize();
  double sum = 0;
  device.download(&sum, loss_sum.data(), sizeof(double));
  backend->release_weights(view);
  const double ours = sum / double(n * Q), theirs = hf.at("loss").get<double>();

  // Both in fp32 with different operation orders; a wrong transpose, head split, GELU or eps moves the loss by
  // far more than 1e-5 relative.
  const double relative = std::abs(theirs - ours) / ours;
  std::printf("mean loss over %zu windows: dptrain %.9f, transformers %.9f, relative difference %.2e\n", n, ours,
              theirs, relative);
  ::testing::Test::RecordProperty("relative_difference", fmt::format("{:.2e}", relative));
  EXPECT_TRUE(std::isfinite(ours));
  EXPECT_GT(ours, 1.0);  // a few steps from ln(256) = 5.5, not a degenerate model
  EXPECT_LE(relative, 1e-5) << "dptrain " << ours << ", transformers " << theirs;
}

// An OUT that is the checkpoint, lies inside it, holds it, or holds another dptrain checkpoint is refused, with
// --overwrite too, before anything is written: the checkpoint stays byte for byte as dptrain wrote it.
TEST_F(HuggingFaceInterop, ExportRefusesAnOutThatWouldOverwriteACheckpoint) {
  ASSERT_NO_FATAL_FAILURE(train_and_save());
  const std::string ckpt = dir_ / "ckpt", step = step_.string();
  const std::string other = copy_of_step("other").string();  // a checkpoint not being exported
  const auto before = tree_bytes(ckpt);
  const struct {
    std::string args, expected;
  } cases[] = {
      {ckpt + " " + step, "is the checkpoint"},
      {step + " " + step, "is the checkpoint"},
      {"--overwrite " + ckpt + " " + step, "is the checkpoint"},
      {ckpt + " " + ckpt, "holds the checkpoint"},
      {"--overwrite " + ckpt + " " + dir_.path.string(), "holds the checkpoint"},
      {ckpt + " " + step + "/hf", "lies inside the checkpoint"},
      {ckpt + " " + ckpt + "/hf", "lies inside the checkpoint"},
      {"--overwrite " + ckpt + " " + other, "holds a dptrain checkpoint (meta.json)"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    expect_refused(export_hf(c.args), c.expected);
  }
  EXPECT_TRUE(tree_bytes(ckpt) == before) << "the checkpoint changed";
  EXPECT_FALSE(fs::exists(step_ / "hf"));
  EXPECT_FALSE(fs::exists(fs::path(ckpt) / "hf"));
}

// A checkpoint whose model.safetensors differs from the XXH64 that meta.json records (one byte flipped) is refused
// naming the file, and no OUT is made.
TEST_F(HuggingFaceInterop, ExportRefusesADamagedCheckpointNamingTheFile) {
  ASSERT_NO_FATAL_FAILURE(train_and_save());
  const fs::path damaged = copy_of_step("damaged");
  const std::string model = (damaged / "model.safetensors").string();
  std::string bytes = testing::file_bytes(model);
  bytes[bytes.size() - 1] ^= 1;  // in the last tensor's data: the file still parses
  testing::write_text(model, bytes);
  const std::string out = dir_ / "hf";
  expect_refused(export_hf(damaged.string() + " " + out),
                 fmt::format("checkpoint file '{}' is damaged: xxh64 ", model));
  EXPECT_FALSE(fs::exists(out));
}

// `latest` is read as `dptrain --resume` reads it: a step folder's name, nothing else. A path to another checkpoint
// and a name with a carriage return are refused, and nothing is exported from them.
TEST_F(HuggingFaceInterop, ExportReadsLatestAsResumeDoes) {
  ASSERT_NO_FATAL_FAILURE(train_and_save());
  const std::string out = dir_ / "hf";
  for (const auto& [name, text, shown] :
       {std::tuple{"elsewhere", std::string("../ckpt/step-000003\n"), std::string(R"("../ckpt/step-000003")")},
        std::tuple{"crlf", std::string("step-000003\r\n"), std::string(R"("step-000003\r")")}}) {
    const fs::path ckpt = dir_ / name;
    fs::create_directories(ckpt);
    fs::copy(step_, ckpt / step_.filename(), fs::copy_options::recursive);
    testing::write_text((ckpt / "latest").string(), text);
    expect_refused(
        export_hf(ckpt.string() + " " + out),
        fmt::format("'{}' names {}, expected a step folder (step-NNNNNN)", (ckpt / "latest").string(), shown));
    EXPECT_FALSE(fs::exists(out));
  }
}

// meta.json is checked as `dptrain --resume` checks it: a format 2 document sealed by its meta_checksum. An edited
// model shape (it would export a wrong model) and a format 2 without its checksums are refused; a number written
// another way with the same value (which dptrain reads back to the same text) is exported; a format 1 document
// (from before checksums) is exported unchecked, with a note.
TEST_F(HuggingFaceInterop, ExportChecksMetaJsonsSealAsResumeDoes) {
  ASSERT_NO_FATAL_FAILURE(train_and_save());
  const auto edited = [this](const std::string& name, const auto& edit) {
    const fs::path copy = copy_of_step(name);
    const std::string meta = (copy / "meta.json").string();
    testing::write_text(meta, edit(testing::file_bytes(meta)));
    return copy;
  };
  const auto as_json = [](const auto& edit) {
    return [edit](const std::string& text) {
      nlohmann::json meta = nlohmann::json::parse(text);
      edit(meta);
      return meta.dump(2);
    };
  };
  const std::string out = dir_ / "hf";
  const fs::path heads =
      edited("heads", as_json([this](nlohmann::json& m) { m["model"]["heads"] = 2 * config_.heads; }));
  expect_refused(export_hf(heads.string() + " " + out),
                 fmt::format("checkpoint '{}': meta.json is damaged: xxh64 ", heads.string()));
  const fs::path unsealed = edited("unsealed", as_json([](nlohmann::json& m) {
                                     m.erase("checksums");
                                     m.erase("meta_checksum");
                                   }));
  expect_refused(export_hf(unsealed.string() + " " + out),
                 "meta.json: 'checksums' is missing, expected an object of file name to \"xxh64:...\" (a "
                 "dptrain-checkpoint-2 records the checksum of every file)");
  EXPECT_FALSE(fs::exists(out));

  // "lr": 0.003 as "lr": 3.000000e-03: the same double.
  const fs::path respelt = edited("respelt", [](std::string text) {
    const std::size_t at = text.find("\"lr\": "), start = at + 6, end = text.find_first_of(",\n", start);
    const double lr = std::stod(text.substr(start, end - start));
    return text.replace(start, end - start, fmt::format("{:e}", lr));
  });
  ASSERT_EQ(testing::occurrences(testing::file_bytes((respelt / "meta.json").string()), "e-0"), 1);
  const auto exported = export_hf(respelt.string() + " " + out);
  EXPECT_EQ(exported.exit_code, 0) << exported.output;

  const fs::path format1 = edited("format-1", as_json([](nlohmann::json& m) {
                                    m["format"] = "dptrain-checkpoint-1";
                                    m.erase("checksums");
                                    m.erase("meta_checksum");
                                  }));
  const auto unchecked = export_hf(format1.string() + " " + dir_ / "hf-1");
  EXPECT_EQ(unchecked.exit_code, 0) << unchecked.output;
  EXPECT_NE(unchecked.output.find("records no checksums (written before dptrain recorded them); model.safetensors "
                                  "is exported unchecked"),
            std::string::npos)
      << unchecked.output;
}

// A malformed meta.json, a missing model.safetensors or an OUT that is a file: one line and exit 2, no OUT.
TEST_F(HuggingFaceInterop, ExportRefusesBadInputInOneLine) {
  ASSERT_NO_FATAL_FAILURE(train_and_save());
  const std::string model = fmt::format(R"("model": {{"vocab": {}, "seq": {}, "layers": {}, "width": {}, "heads": {}}})",
                                        config_.vocab, config_.seq, config_.layers, config_.width, config_.heads);
  const struct {
    std::string meta, expected;
  } metas[] = {
      {"{not json", "meta.json: not valid JSON"},
      {"[1, 2]", "meta.json: the document is [1, 2], expected the JSON object dptrain writes"},
      {R"({"format": "other"})", R"('format' is "other", expected "dptrain-checkpoint-2" or "dptrain-checkpoint-1")"},
      {R"({"format": "dptrain-checkpoint-2"})", "'model' is null"},
      {R"({"format": "dptrain-checkpoint-2", "model": {"vocab": 256, "seq": 16, "layers": "2", "width": 32, )"
       R"("heads": 2}})",
       R"('model.layers' is "2", expected a positive integer)"},
      {R"({"format": "dptrain-checkpoint-2", )" + model + R"(, "checksums": {"model.safetensors": "xxh64:12"}})",
       R"('checksums.model.safetensors' is "xxh64:12", expected "xxh64:" and 16 hex digits)"},
  };
  const std::string out = dir_ / "hf";
  for (std::size_t i = 0; i < std::size(metas); ++i) {
    SCOPED_TRACE(metas[i].meta);
    const fs::path bad = copy_of_step(fmt::format("meta-{}", i));
    testing::write_text((bad / "meta.json").string(), metas[i].meta);
    expect_refused(export_hf(bad.string() + " " + out), metas[i].expected);
  }
  const fs::path no_model = copy_of_step("no-model");
  fs::remove(no_model / "model.safetensors");
  expect_refused(export_hf(no_model.string() + " " + out),
                 fmt::format("cannot read '{}': No such file or directory", (no_model / "model.safetensors").string()));
  EXPECT_FALSE(fs::exists(out));

  testing::write_text(out, "a file");
  expect_refused(export_hf((dir_ / "ckpt") + " " + out), "exists and is not a folder");
  EXPECT_EQ(testing::file_bytes(out), "a file");
  expect_refused(export_hf((dir_ / "ckpt") + " " + out + "/sub"),
                 fmt::format("OUT '{}/sub': '{}' is in its path and is not a folder", out, out));
  // A meta.json nested deeper than the parser goes.
  const fs::path deep = copy_of_step("deep");
  testing::write_text((deep / "meta.json").string(), std::string(100000, '['));
  expect_refused(export_hf(deep.string() + " " + dir_ / "hf-deep"), "meta.json: not valid JSON");
}

// An OUT that exists is written into, not replaced: the current folder (a shell standing in it keeps seeing it),
// and a link to an empty folder (the link stays, the files land in its target).
TEST_F(HuggingFaceInterop, ExportIntoTheCurrentFolderOrALinkWritesIntoIt) {
  ASSERT_NO_FATAL_FAILURE(train_and_save());
  const std::string ckpt = dir_ / "ckpt";
  fs::create_directory(dir_ / "here");
  const auto inode = [](const std::string& path) { return run_command("stat -c %i " + path).output; };
  const std::string before = inode(dir_ / "here");
  const auto here = run_command(
      fmt::format("cd {} && {} {}/scripts/export_hf.py {} .", dir_ / "here", python(), testing::source_dir(), ckpt));
  ASSERT_EQ(here.exit_code, 0) << here.output;
  EXPECT_TRUE(fs::is_regular_file(dir_ / "here/config.json"));
  EXPECT_TRUE(fs::is_regular_file(dir_ / "here/model.safetensors"));
  EXPECT_EQ(inode(dir_ / "here"), before);
  fs::create_directory(dir_ / "target");
  fs::create_directory_symlink(dir_ / "target", dir_ / "link");
  const auto linked = export_hf(ckpt + " " + dir_ / "link");
  ASSERT_EQ(linked.exit_code, 0) << linked.output;
  EXPECT_TRUE(fs::is_symlink(dir_ / "link"));
  EXPECT_EQ(testing::file_bytes(dir_ / "target/model.safetensors"),
            testing::file_bytes(dir_ / "here/model.safetensors"));
  for (const char* folder : {"here", "target"})
    for (const auto& entry : fs::directory_iterator(dir_ / folder))
      EXPECT_FALSE(entry.path().filename().string().starts_with(".export.tmp")) << "a temporary left in " << folder;
}

// OUT may be new or empty; a folder holding anything (an earlier export too) needs --overwrite, which replaces
// config.json and model.safetensors and keeps every other file.
TEST_F(HuggingFaceInterop, ExportIntoAFolderWithFilesNeedsOverwriteAndKeepsThem) {
  ASSERT_NO_FATAL_FAILURE(train_and_save());
  const std::string ckpt = dir_ / "ckpt", out = dir_ / "hf";
  fs::create_directory(out);
  const auto first = export_hf(ckpt + " " + out);  // empty: written
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string exported = testing::file_bytes(out + "/model.safetensors");
  testing::write_text(out + "/tokenizer.json", "{}");
  expect_refused(export_hf(ckpt + " " + out), "is not empty (config.json, model.safetensors, tokenizer.json)");
  testing::write_text(out + "/model.safetensors", "stale");
  const auto again = export_hf("--overwrite " + ckpt + " " + out);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(testing::file_bytes(out + "/model.safetensors") == exported);
  EXPECT_EQ(testing::file_bytes(out + "/tokenizer.json"), "{}");
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir_.path)) names.insert(entry.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"ckpt", "corpus.txt", "hf"})) << "a temporary folder was left";
}

}  // namespace
}  // namespace dptrain
