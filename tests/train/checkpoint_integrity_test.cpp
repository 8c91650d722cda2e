// Checkpoint integrity in one process: a save interrupted between any two of its atomic steps leaves a loadable
// `latest`; flipped bytes, duplicated shards, non-finite values and damaged meta.json are refused with the file
// named; stale temporaries and --keep-last pruning remove exactly what they should; the --save set-up checks.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>

#include "dptrain/core/checksum.hpp"
#include "dptrain/core/error.hpp"
#include "dptrain/train/checkpoint.hpp"
#include "dptrain/train/checkpoint_directory.hpp"
#include "dptrain/train/checkpoint_meta.hpp"
#include "dptrain/train/safetensors.hpp"
#include "test_support.hpp"

namespace dptrain {
namespace {

namespace fs = std::filesystem;
using testing::file_bytes;
using testing::TemporaryDirectory;
using testing::write_text;

// The message of the UserError f throws; a failure when it throws none.
template <typename F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

class CheckpointIntegrity : public ::testing::Test {
 protected:
  CheckpointIntegrity() : dir_("ckpt-integrity") {
    options_.model = config_;
    a_.initialise(3);
    b_.initialise(99);
  }
  void train(int steps) {
    for (int s = 0; s < steps; ++s) a_.step(windows_.data(), 2, {.lr = 1e-2, .weight_decay = 0.1, .grad_clip = 1.0});
  }
  std::string root() const { return dir_.path.string(); }
  ResumePoint load() { return load_checkpoint(root(), b_, options_); }
  nlohmann::json meta(const std::string& step_dir) const { return nlohmann::json::parse(file_bytes(step_dir + "/meta.json")); }
  // Rewrites a step folder's meta.json with `change` applied, sealed again as a save would seal it (what is tested
  // is the check of the content, as a writer with a bug would leave it; a document no longer an object stays so).
  template <typename F>
  void edit_meta(const std::string& step_dir, F change) {
    nlohmann::json m = meta(step_dir);
    change(m);
    if (m.is_object()) seal_checkpoint_meta(m);
    write_text(step_dir + "/meta.json", m.dump());
  }

  TemporaryDirectory dir_;
  ModelConfig config_{.vocab = 13, .seq = 6, .layers = 1, .width = 8, .heads = 2};
  TrainOptions options_;
  std::unique_ptr<Backend> backend_a_ = make_backend("cpu"), backend_b_ = make_backend("cpu");
  DataParallelEngine a_{config_, *backend_a_, RankGroup{}, EngineSettings{}, 2};
  DataParallelEngine b_{config_, *backend_b_, RankGroup{}, EngineSettings{}, 2};
  std::vector<std::int32_t> windows_ = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0, 1};
};

struct Interrupted {};  // stands for a kill at a publication point

TEST_F(CheckpointIntegrity, AnInterruptedSaveLeavesALoadableLatest) {
  train(1);
  save_checkpoint(root(), a_, options_, 3);
  const std::vector<bf16> at3 = a_.full_weights();
  train(1);
  // A kill before the rename or after it leaves step 3 as latest; after the switch, step 4.
  const std::pair<PublishPoint, std::string> cases[] = {{PublishPoint::before_rename, "step-000003"},
                                                         {PublishPoint::renamed, "step-000003"},
                                                         {PublishPoint::latest_switched, "step-000004"}};
  for (const auto& [point, expected] : cases) {
    EXPECT_THROW(save_checkpoint(root(), a_, options_, 4, {}, false,
                                 [point = point](PublishPoint at) {
                                   if (at == point) throw Interrupted{};
                                 }),
                 Interrupted);
    EXPECT_EQ(read_latest(root()), expected) << int(point);
    EXPECT_EQ(load().step, expected == "step-000003" ? 3 : 4) << int(point);
    if (expected == "step-000003") {
      const std::vector<bf16> loaded = b_.full_weights();
      EXPECT_EQ(std::memcmp(loaded.data(), at3.data(), at3.size() * sizeof(bf16)), 0);
    }
    // What the kill left is cleaned up as a restarted run does: its temporary removed, the next save publishes.
    remove_stale_temporaries(root());
    EXPECT_FALSE(fs::exists(dir_ / ".step-000004.tmp"));
    for (const std::string& folder : step_folders(root()))
      if (folder != "step-000003") fs::remove_all(dir_ / folder);
    write_text(dir_ / "latest", "step-000003\n");
  }

  // Replacing a step folder of the same step: the new one goes under a fresh name, `latest` switches to it, and
  // only then is the old one removed. A kill just before that removal leaves both, `latest` naming the new.
  save_checkpoint(root(), a_, options_, 4);
  EXPECT_THROW(save_checkpoint(root(), a_, options_, 4, {}, false,
                               [](PublishPoint at) {
                                 if (at == PublishPoint::latest_switched) throw Interrupted{};
                               }),
               Interrupted);
  EXPECT_EQ(read_latest(root()), "step-000004-2");
  EXPECT_EQ(step_folders(root()), (std::vector<std::string>{"step-000003", "step-000004", "step-000004-2"}));
  EXPECT_EQ(load().step, 4);
  // Both names are taken now: the next is the first free one, and both older folders of step 4 go.
  EXPECT_EQ(save_checkpoint(root(), a_, options_, 4), dir_ / "step-000004-3");
  EXPECT_EQ(step_folders(root()), (std::vector<std::string>{"step-000003", "step-000004-3"}));
  EXPECT_EQ(file_bytes(dir_ / "latest"), "step-000004-3\n");
}

TEST_F(CheckpointIntegrity, AFlippedByteIsRefusedNamingTheFile) {
  train(2);
  const std::string step = save_checkpoint(root(), a_, options_, 2);
  EXPECT_EQ(meta(step)["checksums"]["model.safetensors"], checksum_text(xxh64(file_bytes(step + "/model.safetensors"))));
  for (const std::string file : {"model.safetensors", "optimizer.safetensors"}) {
    const std::string path = step + "/" + file, original = file_bytes(path);
    std::string damaged = original;
    damaged[damaged.size() - 3] ^= 0x10;  // a bit of the last tensor's data: the header still parses
    write_text(path, damaged);
    EXPECT_EQ(refusal([&] { load(); }),
              fmt::format("checkpoint file '{}' is damaged: xxh64 {:016x}, expected {:016x} (recorded in meta.json "
                          "when it was written)",
                          path, xxh64(damaged), xxh64(original)));
    write_text(path, original);
  }
  EXPECT_EQ(load().step, 2);
}

// meta.json is sealed by its own checksum: one flipped byte — a value that still parses (the step), or the name of
// the key that holds the files' checksums — is refused, where it used to resume silently wrong or unverified.
// Format 1 (no seal) still loads.
TEST_F(CheckpointIntegrity, AFlippedByteInMetaJsonIsRefused) {
  train(2);
  const std::string step = save_checkpoint(root(), a_, options_, 2), path = step + "/meta.json";
  const std::string original = file_bytes(path);
  ASSERT_NE(original.find("\"format\": \"dptrain-checkpoint-2\""), std::string::npos) << original;
  ASSERT_NE(original.find("\"meta_checksum\": \"xxh64:"), std::string::npos) << original;
  const std::string recorded = meta(step)["meta_checksum"];
  const auto flipped = [&](const std::string& from, const std::string& to) {
    std::string text = original;
    const std::size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  const std::string step_flipped = flipped("\"step\": 2,", "\"step\": 3,");  // 0x32 → 0x33: one bit
  write_text(path, step_flipped);
  nlohmann::json contents = nlohmann::json::parse(step_flipped);
  contents.erase("meta_checksum");
  EXPECT_EQ(refusal([&] { load(); }),
            fmt::format("checkpoint '{}': meta.json is damaged: xxh64 {:016x} of its contents, expected {} (recorded "
                        "in it as meta_checksum when it was written)",
                        step, xxh64(contents.dump()), recorded.substr(6)));
  // A key's name with a flipped byte: the key is missing.
  for (const auto& [key, flip, expected] :
       {std::tuple{"checksums", "bhecksums", "an object of file name to \"xxh64:...\""},
        std::tuple{"meta_checksum", "meta_checksun", "\"xxh64:\" and 16 hex digits"}}) {
    write_text(path, flipped(fmt::format("\"{}\"", key), fmt::format("\"{}\"", flip)));
    EXPECT_EQ(refusal([&] { load(); }),
              fmt::format("checkpoint '{}': meta.json: missing key (key '{}': expected {})", step, key, expected));
  }
  // The format alone changed to the one before the seal: the seal is still verified, and the change found.
  nlohmann::json downgraded = nlohmann::json::parse(original);
  downgraded["format"] = kCheckpointFormatUnsealed;
  write_text(path, downgraded.dump(2));
  downgraded.erase("meta_checksum");
  EXPECT_EQ(refusal([&] { load(); }),
            fmt::format("checkpoint '{}': meta.json is damaged: xxh64 {:016x} of its contents, expected {} (recorded "
                        "in it as meta_checksum when it was written)",
                        step, xxh64(downgraded.dump()), recorded.substr(6)));
  // What a save of the format before the seal wrote: loads, its files still checked against "checksums".
  nlohmann::json unsealed = nlohmann::json::parse(original);
  unsealed.erase("meta_checksum");
  unsealed["format"] = kCheckpointFormatUnsealed;
  write_text(path, unsealed.dump(2));
  EXPECT_EQ(load().step, 2);
  write_text(path, original);
  EXPECT_EQ(load().step, 2);
}

// What is not a regular file where a save writes one (a folder, a device that reads forever, a FIFO that blocks)
// is refused naming it, and `latest` is shown as it is, one line.
TEST_F(CheckpointIntegrity, NonRegularFilesAndAStrangeLatestAreRefusedNamingThem) {
  train(1);
  const std::string step = save_checkpoint(root(), a_, options_, 1);
  const std::string optimizer = step + "/optimizer.safetensors";
  const std::string saved = file_bytes(optimizer);
  fs::remove(optimizer);
  fs::create_symlink("/dev/zero", optimizer);
  EXPECT_EQ(refusal([&] { load(); }),
            fmt::format("checkpoint file '{}' is not a regular file (expected the file a save wrote)", optimizer));
  fs::remove(optimizer);
  ASSERT_EQ(::mkfifo(optimizer.c_str(), 0600), 0);
  EXPECT_EQ(refusal([&] { load(); }),
            fmt::format("checkpoint file '{}' is not a regular file (expected the file a save wrote)", optimizer));
  fs::remove(optimizer);
  write_text(optimizer, saved);
  const std::string latest = file_bytes(root() + "/latest");
  write_text(root() + "/latest", "garbage\nmore");
  EXPECT_EQ(refusal([&] { load(); }), fmt::format("--resume: '{}/latest' names \"garbage\\nmore\", expected a step "
                                                  "folder (step-NNNNNN)",
                                                  root()));
  fs::remove(root() + "/latest");
  fs::create_directory(root() + "/latest");
  EXPECT_EQ(refusal([&] { load(); }),
            fmt::format("--resume: '{}/latest' is not a regular file (expected the one line a save writes, the name "
                        "of the step folder)",
                        root()));
  // --save's checks at set-up read no `latest` that is not a regular file (a FIFO would block them), and refuse one
  // that a save could not replace.
  fs::remove(root() + "/latest");
  ASSERT_EQ(::mkfifo((root() + "/latest").c_str(), 0600), 0);
  TrainOptions save = options_;
  save.save = root();
  SaveLock lock;
  EXPECT_EQ(refusal([&] { prepare_save_directory(save, 1000, 10, lock); }).substr(0, 90),
            fmt::format("--save: '{}' already holds checkpoints (latest: not a regular file)", root()).substr(0, 90));
  save.overwrite = true;
  EXPECT_EQ(refusal([&] { prepare_save_directory(save, 1000, 10, lock); }),
            fmt::format("--save: '{}/latest' is not a regular file (expected the one line a save writes; remove it, "
                        "or give another --save directory)",
                        fs::absolute(root()).string()));
  // A `latest` of a megabyte is shown cut, in one line.
  fs::remove(root() + "/latest");
  write_text(root() + "/latest", std::string(1 << 20, 'x'));
  EXPECT_EQ(refusal([&] { load(); }), fmt::format("--resume: '{}/latest' names \"{}\"..., expected a step folder "
                                                  "(step-NNNNNN)",
                                                  root(), std::string(64, 'x')));
  write_text(root() + "/latest", latest);
  EXPECT_EQ(refusal([&] { load_checkpoint(step, b_, options_); }),
            fmt::format("--resume: '{}' is a step folder; --resume takes the checkpoint directory that holds it and "
                        "its 'latest' file ('{}')",
                        step, root()));
  EXPECT_EQ(load().step, 1);
}

TEST_F(CheckpointIntegrity, ShardsMustTileTheFlatBufferExactlyOnce) {
  train(1);
  const std::string step = save_checkpoint(root(), a_, options_, 1);
  const std::size_t n = a_.layout().total();
  edit_meta(step, [](nlohmann::json& m) {
    m["optimizer_shards"] = {"optimizer.safetensors", "optimizer.safetensors"};
  });
  const std::string shard = step + "/optimizer.safetensors";
  SafetensorsFile file = read_safetensors(shard);
  // The file holds one range per unit; the first one of the second copy overlaps the first copy's.
  nlohmann::json first;
  for (const auto& range : nlohmann::json::parse(file.metadata.at("ranges")))
    if (range[0] == 0) first = range;
  ASSERT_TRUE(first.is_array()) << file.metadata.at("ranges");
  EXPECT_EQ(refusal([&] { load(); }),
            fmt::format("checkpoint '{}': optimizer shards '{}' and '{}' both hold elements [0, {}) of the {} "
                        "parameters; the shards must cover [0, {}) exactly once",
                        step, shard, shard, first[1].get<std::size_t>(), n, n));

  // A shard holding less than its share leaves a gap: rewrite the file to hold [0, n - 4) only.
  std::vector<TensorToWrite> tensors;
  for (const char* name : {"master", "adam_m", "adam_v"})
    tensors.push_back({name, "F32", {n - 4}, file.tensors.at(name).data.data(), (n - 4) * 4});
  const std::uint64_t hash =
      write_safetensors(shard, tensors, {{"ranges", nlohmann::json::array({{0, n - 4}}).dump()}});
  edit_meta(step, [&](nlohmann::json& m) {
    m["optimizer_shards"] = {"optimizer.safetensors"};
    m["checksums"]["optimizer.safetensors"] = checksum_text(hash);
  });
  EXPECT_EQ(refusal([&] { load(); }),
            fmt::format("checkpoint '{}': no optimizer shard holds elements [{}, {}) of the {} parameters; the shards "
                        "must cover [0, {}) exactly once",
                        step, n - 4, n, n, n));
}

TEST_F(CheckpointIntegrity, NonFiniteValuesAreRefusedNamingFileAndTensor) {
  train(1);
  const std::string step = save_checkpoint(root(), a_, options_, 1);
  // Element 5 of adam_v becomes NaN, the checksum is recomputed: only the value check can catch it.
  const std::string shard = step + "/optimizer.safetensors";
  SafetensorsFile file = read_safetensors(shard);
  reinterpret_cast<float*>(file.tensors.at("adam_v").data.data())[5] = std::numeric_limits<float>::quiet_NaN();
  std::vector<TensorToWrite> tensors;
  for (const char* name : {"master", "adam_m", "adam_v"}) {
    const TensorRead& t = file.tensors.at(name);
    tensors.push_back({name, t.dtype, t.shape, t.data.data(), t.data.size()});
  }
  std::uint64_t hash = write_safetensors(shard, tensors, file.metadata);
  edit_meta(step, [&](nlohmann::json& m) { m["checksums"]["optimizer.safetensors"] = checksum_text(hash); });
  EXPECT_EQ(refusal([&] { load(); }),
            fmt::format("checkpoint file '{}': tensor 'adam_v' holds nan at element 5; a checkpoint must hold finite "
                        "values",
                        shard));
  // A negative second moment (finite, but no mean of squares): √v would be NaN two steps after the resume.
  reinterpret_cast<float*>(file.tensors.at("adam_v").data.data())[5] = -1.0f;
  hash = write_safetensors(shard, tensors, file.metadata);
  edit_meta(step, [&](nlohmann::json& m) { m["checksums"]["optimizer.safetensors"] = checksum_text(hash); });
  EXPECT_EQ(refusal([&] { load(); }),
            fmt::format("checkpoint file '{}': tensor 'adam_v' holds -1 at element 5; its values are squares' means, "
                        "never negative",
                        shard));

  // An infinite weight in the model file.
  const std::string model = step + "/model.safetensors";
  SafetensorsFile weights = read_safetensors(model);
  const std::string first = a_.layout().entries().front().name;
  reinterpret_cast<bf16*>(weights.tensors.at(first).data.data())[2] = to_bf16(std::numeric_limits<float>::infinity());
  std::vector<TensorToWrite> model_tensors;
  for (const auto& e : a_.layout().entries()) {
    const TensorRead& t = weights.tensors.at(e.name);
    model_tensors.push_back({e.name, t.dtype, t.shape, t.data.data(), t.data.size()});
  }
  hash = write_safetensors(model, model_tensors, weights.metadata);
  edit_meta(step, [&](nlohmann::json& m) { m["checksums"]["model.safetensors"] = checksum_text(hash); });
  EXPECT_EQ(refusal([&] { load(); }),
            fmt::format("checkpoint file '{}': tensor '{}' holds inf at element 2; a checkpoint must hold finite "
                        "values",
                        model, first));
}

TEST_F(CheckpointIntegrity, DamagedMetaJsonNamesTheCheckpointAndTheKey) {
  train(1);
  const std::string step = save_checkpoint(root(), a_, options_, 1);
  const std::string good = file_bytes(step + "/meta.json"), prefix = fmt::format("checkpoint '{}': meta.json: ", step);
  const std::pair<std::function<void(nlohmann::json&)>, std::string> cases[] = {
      {[](nlohmann::json& m) { m["step"] = "1"; },
       "wrong type (key 'step' is a string \"1\", expected an integer from 0 to 2147483647)"},
      {[](nlohmann::json& m) { m.erase("step"); },
       "missing key (key 'step': expected an integer from 0 to 2147483647)"},
      {[](nlohmann::json& m) { m["step"] = -4; },
       "value out of range (key 'step' is -4, expected an integer from 0 to 2147483647)"},
      {[](nlohmann::json& m) { m["model"] = 7; },
       "wrong type (key 'model' is a number 7, expected an object of the model's shape)"},
      {[](nlohmann::json& m) { m["optimizer_shards"] = {"../../etc/passwd"}; },
       "bad file name (key 'optimizer_shards[0]' is \"../../etc/passwd\", expected a file name inside the step "
       "folder)"},
      {[](nlohmann::json& m) { m["checksums"]["model.safetensors"] = "crc:12"; },
       "bad checksum (key 'checksums.model.safetensors' is a string \"crc:12\", expected \"xxh64:\" and 16 hex "
       "digits)"},
      {[](nlohmann::json& m) { m["format"] = "other-1"; },
       "unknown format (key 'format' is a string \"other-1\", expected \"dptrain-checkpoint-2\" or "
       "\"dptrain-checkpoint-1\")"},
      {[](nlohmann::json& m) { m["parameters"] = m["parameters"].get<std::size_t>() + 1; },
       fmt::format("inconsistent (key 'parameters' is {}, but its model shape has {} parameters)",
                   a_.layout().total() + 1, a_.layout().total())},
      {[](nlohmann::json& m) { m["parameters"] = 0; },
       "value out of range (key 'parameters' is 0, expected an integer from 1 to 9223372036854775807)"},
      {[](nlohmann::json& m) { m["parallel"]["zero"] = 4; },
       "value out of range (key 'parallel.zero' is 4, expected an integer from 0 to 3)"},
      {[](nlohmann::json& m) { m["parallel"]["ranks"] = "2"; },
       "wrong type (key 'parallel.ranks' is a string \"2\", expected an integer from 1 to 2147483647)"},
      {[](nlohmann::json& m) { m["parallel"].erase("ranks"); },
       "missing key (key 'parallel.ranks': expected an object {\"ranks\": R, \"zero\": S})"},
      {[](nlohmann::json& m) { m["parallel"] = 2; },
       "wrong type (key 'parallel' is a number 2, expected an object {\"ranks\": R, \"zero\": S})"},
      {[](nlohmann::json& m) { m = nlohmann::json::array({1}); },
       "wrong type (the document is a array [1], expected an object)"},
      // The recorded options, each of its option's kind (a resume names them when they changed).
      {[](nlohmann::json& m) { m["training"]["steps"] = "8"; },
       "wrong type (key 'training.steps' is a string \"8\", expected a whole number (e.g. 4))"},
      {[](nlohmann::json& m) { m["training"]["lr"] = true; },
       "wrong type (key 'training.lr' is a boolean true, expected a number (e.g. 0.001))"},
      {[](nlohmann::json& m) { m["training"] = 3; },
       "wrong type (key 'training' is a number 3, expected an object of option values)"},
      // The data's and the generator's position are the step.
      {[](nlohmann::json& m) { m["data"]["next_step"] = 2; },
       "inconsistent (key 'data.next_step' is 2, but the checkpoint is at step 1)"},
      {[](nlohmann::json& m) { m["rng"]["step"] = 0; },
       "inconsistent (key 'rng.step' is 0, but the checkpoint is at step 1)"},
  };
  for (const auto& [change, what] : cases) {
    write_text(step + "/meta.json", good);
    edit_meta(step, change);
    EXPECT_EQ(refusal([&] { load(); }), prefix + what);
  }
  write_text(step + "/meta.json", "{\"step\": ");
  EXPECT_EQ(refusal([&] { load(); }).substr(0, prefix.size() + 19), prefix + "not valid JSON (par");
  write_text(step + "/meta.json", good);
  EXPECT_EQ(load().step, 1);
}

// Regression of scripts/fuzz-checkpoint.sh's finding: a number too large for a double is the JSON library's
// out_of_range error, not a parse_error, and escaped the reader (exit 1 with the library's bare message).
TEST(CheckpointMeta, ANumberBeyondDoubleIsRefusedAsInvalidJson) {
  for (const char* text : {"7E8000", "{\"step\": 1e999}"}) {
    const std::string message = refusal([&] { parse_checkpoint_meta("d/step-000001", text); });
    EXPECT_EQ(message.substr(0, 60), "checkpoint 'd/step-000001': meta.json: not valid JSON (numbe") << message;
  }
}

TEST(CheckpointDirectory, StaleTemporariesAndPruning) {
  TemporaryDirectory dir("ckpt-dir");
  for (const char* folder : {".step-000004.tmp", ".step-x.tmp", "notes.tmp"}) fs::create_directories(dir / folder);
  for (const char* folder : {"step-000001", "step-000002", "step-000002-2", "step-000003", "step-000004"}) {
    fs::create_directories(dir / folder);
    write_text(dir / (std::string(folder) + "/meta.json"), "{}");  // what makes a step folder a checkpoint
  }
  // Folders of such names that are not checkpoints (no meta.json; a step beyond 64 bits) are the user's: never
  // listed, pruned or replaced.
  for (const char* folder : {"step-000002-3", "step-9", "step-99999999999999999999999"}) {
    fs::create_directories(dir / folder);
    write_text(dir / (std::string(folder) + "/notes.txt"), "the user's");
  }
  write_text(dir / ".step-000005.tmp-file", "a file, not a folder");
  EXPECT_EQ(remove_stale_temporaries(dir.path.string()), std::vector<std::string>{".step-000004.tmp"});
  EXPECT_TRUE(fs::exists(dir / ".step-x.tmp"));
  EXPECT_TRUE(fs::exists(dir / "notes.tmp"));
  EXPECT_TRUE(fs::exists(dir / ".step-000005.tmp-file"));

  EXPECT_EQ(step_folders(dir.path.string()),
            (std::vector<std::string>{"step-000001", "step-000002", "step-000002-2", "step-000003", "step-000004"}));
  // `latest` names the oldest (a resumed older checkpoint): it is kept whatever its age.
  write_text(dir / "latest", "step-000001\n");
  EXPECT_EQ(prune_steps(dir.path.string(), 2),
            (std::vector<std::string>{"step-000002", "step-000002-2", "step-000003"}));
  EXPECT_EQ(step_folders(dir.path.string()), (std::vector<std::string>{"step-000001", "step-000004"}));
  EXPECT_TRUE(prune_steps(dir.path.string(), 0).empty());
  write_text(dir / "latest", "step-000004\n");
  EXPECT_EQ(prune_steps(dir.path.string(), 1), std::vector<std::string>{"step-000001"});
  EXPECT_TRUE(fs::exists(dir / ".step-x.tmp"));
  for (const char* folder : {"step-000002-3", "step-9", "step-99999999999999999999999"})
    EXPECT_EQ(file_bytes(dir / (std::string(folder) + "/notes.txt")), "the user's") << folder;
  // Publishing step 9 beside the user's step-9: another name, and the user's folder stays.
  fs::create_directories(dir / ".step-000009.tmp");
  write_text(dir / ".step-000009.tmp/meta.json", "{}");
  EXPECT_EQ(publish_step(dir.path.string(), dir / ".step-000009.tmp", "step-9"), "step-9-2");
  EXPECT_EQ(file_bytes(dir / "step-9/notes.txt"), "the user's");
  EXPECT_EQ(step_folders(dir.path.string()), (std::vector<std::string>{"step-000004", "step-9-2"}));
}

TEST(CheckpointDirectory, SaveIsCheckedAtSetUp) {
  TemporaryDirectory dir("ckpt-setup");
  TrainOptions options;
  SaveLock lock;  // this run's, taken once the directory exists
  write_text(dir / "file", "not a directory");
  options.save = dir / "file/ckpt";
  EXPECT_EQ(refusal([&] { prepare_save_directory(options, 1000, 10, lock); }),
            fmt::format("--save: '{}' is in the path of '{}' and is not a directory (expected a directory or a path "
                        "that can be created)",
                        dir / "file", options.save));

  options.save = dir / "ckpt";
  prepare_save_directory(options, 1000, 10, lock);  // nothing created before the ranks agree on --save
  EXPECT_FALSE(fs::exists(options.save));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), {}), 1);
  fs::create_directories(dir / "ckpt/step-000005");
  write_text(dir / "ckpt/latest", "step-000005\n");
  const std::string refused = fmt::format(
      "--save: '{}' already holds checkpoints (latest: step-000005); pass --overwrite to replace them, --resume {} to "
      "continue from them, or another --save directory",
      options.save, options.save);
  EXPECT_EQ(refusal([&] { prepare_save_directory(options, 1000, 10, lock); }), refused);
  options.resume = dir / "elsewhere";  // resuming from another directory does not make this one free to replace
  fs::create_directories(options.resume);
  EXPECT_EQ(refusal([&] { prepare_save_directory(options, 1000, 10, lock); }), refused);
  options.resume = dir / "ckpt/";  // the same directory, spelled differently: continues
  prepare_save_directory(options, 1000, 10, lock);
  options.resume.clear();
  options.overwrite = true;
  fs::create_directories(dir / "ckpt/.step-000006.tmp");
  write_text(dir / "ckpt/latest.tmp.4476", "step-000006\n");  // a killed run's temporary `latest`
  write_text(dir / "ckpt/.dptrain.lock", "");                   // made by that run's first save
  prepare_save_directory(options, 1000, 10, lock);
  EXPECT_FALSE(fs::exists(dir / "ckpt/.step-000006.tmp"));
  EXPECT_FALSE(fs::exists(dir / "ckpt/latest.tmp.4476"));
  EXPECT_TRUE(lock.held());
  // Another run on the same directory (another lock, as another process would hold) is refused, and removes
  // nothing of this one's.
  fs::create_directories(dir / "ckpt/.step-000007.tmp");
  SaveLock other;
  EXPECT_EQ(refusal([&] { prepare_save_directory(options, 1000, 10, other); }),
            fmt::format("--save: '{}' is in use by another run (it holds '{}'); wait for that run to end, or give "
                        "another --save directory",
                        fs::absolute(options.save).string(), (fs::absolute(options.save) / ".dptrain.lock").string()));
  EXPECT_TRUE(fs::exists(dir / "ckpt/.step-000007.tmp"));
  EXPECT_TRUE(fs::exists(dir / "ckpt/step-000005"));  // kept until the new run has a checkpoint of its own

  EXPECT_EQ(checkpoint_bytes(1000, 10), 14u * 1000 + 2560 + 65536);
  const std::uint64_t needed = std::uint64_t(1) << 62;  // 4 EiB: more than any test machine has
  const std::string message = refusal([&] { require_free_space(options.save, needed); });
  EXPECT_NE(message.find(fmt::format("--save: '{}' has ", options.save)), std::string::npos) << message;
  EXPECT_NE(message.find(fmt::format(" bytes free, one checkpoint needs {} bytes", needed)), std::string::npos)
      << message;
}

}  // namespace
}  // namespace dptrain
