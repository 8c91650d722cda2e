// Saving and restoring the training state as safetensors plus JSON metadata; a load verifies every file's
// checksum, the shards' tiling of the flat buffer and that every value is finite before the run uses any of it.
#include "dptrain/train/checkpoint.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "dptrain/core/atomic_file.hpp"
#include "dptrain/core/checksum.hpp"
#include "dptrain/core/error.hpp"
#include "dptrain/train/checkpoint_directory.hpp"
#include "dptrain/train/checkpoint_meta.hpp"
#include "dptrain/train/option_table.hpp"
#include "dptrain/train/safetensors.hpp"

namespace dptrain {
namespace fs = std::filesystem;

namespace {

nlohmann::json model_json(const ModelConfig& m) {
  return {{"vocab", m.vocab}, {"seq", m.seq}, {"layers", m.layers}, {"width", m.width}, {"heads", m.heads}};
}

template <typename T>
const TensorRead& expect_tensor(const SafetensorsFile& file, const std::string& path, const std::string& name,
                                const std::string& dtype, std::size_t numel) {
  auto it = file.tensors.find(name);
  require(it != file.tensors.end(), "checkpoint file '{}' has no tensor '{}'", path, name);
  require(it->second.dtype == dtype && it->second.data.size() == numel * sizeof(T),
          "checkpoint file '{}': tensor '{}' is {} of {} bytes, expected {} of {} bytes", path, name,
          it->second.dtype, it->second.data.size(), dtype, numel * sizeof(T));
  return it->second;
}

// The file's bytes, checked against meta.json's checksum when it records one, then parsed.
SafetensorsFile read_verified(const std::string& path, const std::string& file_name, const CheckpointMeta& meta) {
  const std::string bytes = read_file_bytes(path);
  if (auto it = meta.checksums.find(file_name); it != meta.checksums.end()) {
    const std::uint64_t actual = xxh64(bytes);
    require(actual == it->second,
            "checkpoint file '{}' is damaged: xxh64 {:016x}, expected {:016x} (recorded in meta.json when it was "
            "written)",
            path, actual, it->second);
  }
  return parse_safetensors(path, bytes);
}

// A NaN or Inf in a checkpoint would poison every later step: refused with the first offending element.
// Every value finite, and with `non_negative` none below 0 (Adam's v, a mean of squares: a negative one makes the
// update's √v NaN two steps after the resume).
void require_finite(const std::string& path, const std::string& tensor, const TensorRead& t,
                    bool non_negative = false) {
  const std::size_t n = t.data.size() / (t.dtype == "BF16" ? 2 : 4);
  for (std::size_t i = 0; i < n; ++i) {
    float value = 0;
    if (t.dtype == "BF16") {
      bf16 x;
      std::memcpy(&x.bits, t.data.data() + 2 * i, 2);
      value = to_float(x);
    } else {
      std::memcpy(&value, t.data.data() + 4 * i, 4);
    }
    require(std::isfinite(value),
            "checkpoint file '{}': tensor '{}' holds {} at element {}; a checkpoint must hold finite values", path,
            tensor, value, i);
    require(!non_negative || value >= 0,
            "checkpoint file '{}': tensor '{}' holds {} at element {}; its values are squares' means, never negative",
            path, tensor, value, i);
  }
}

// One range of the flat buffer and the shard holding it.
struct HeldRange {
  std::size_t begin, end;
  std::string file;
};

// The shards together must hold every element of [0, total) exactly once: a duplicated or missing shard would
// otherwise restore some elements twice (the last copy winning) or leave others at their initial values.
void require_exact_tiling(const std::string& step_dir, std::vector<HeldRange> held, std::size_t total) {
  std::sort(held.begin(), held.end(), [](const HeldRange& a, const HeldRange& b) { return a.begin < b.begin; });
  std::size_t covered = 0;
  const HeldRange* previous = nullptr;
  for (const HeldRange& r : held) {
    if (r.begin == r.end) continue;
    require(r.begin >= covered,
            "checkpoint '{}': optimizer shards '{}' and '{}' both hold elements [{}, {}) of the {} parameters; the "
            "shards must cover [0, {}) exactly once",
            step_dir, previous ? previous->file : r.file, r.file, r.begin, std::min(covered, r.end), total, total);
    require(r.begin == covered,
            "checkpoint '{}': no optimizer shard holds elements [{}, {}) of the {} parameters; the shards must "
            "cover [0, {}) exactly once",
            step_dir, covered, r.begin, total, total);
    covered = r.end;
    previous = &r;
  }
  require(covered == total,
          "checkpoint '{}': no optimizer shard holds elements [{}, {}) of the {} parameters; the shards must cover "
          "[0, {}) exactly once",
          step_dir, covered, total, total, total);
}

}  // namespace

std::string save_checkpoint(const std::string& dir, DataParallelEngine& engine, const TrainOptions& options,
                            int step, const CheckpointRanks& ranks_of_run, bool first_save,
                            const std::function<void(PublishPoint)>& hook) {
  const int rank = engine.rank(), ranks = engine.ranks();
  const bool sharded = engine.settings().zero_stage > 0 && ranks > 1;
  const std::string name = fmt::format("step-{:06d}", step);
  // The temporary name matches the pattern remove_stale_temporaries() looks for, and only that.
  const fs::path root(dir), temporary = root / ("." + name + ".tmp");
  const std::vector<bf16> weights = engine.full_weights();  // [N]
  std::error_code ec;
  if (rank == 0) {
    fs::create_directories(root, ec);
    require(!ec, "cannot create checkpoint directory '{}': {}", dir, ec.message());
    fs::remove_all(temporary, ec);
    fs::create_directories(temporary, ec);
    require(!ec, "cannot create '{}': {}", temporary.string(), ec.message());
  }
  ranks_of_run.barrier();

  std::vector<std::string> shards;
  for (int r = 0; r < (sharded ? ranks : 1); ++r)
    shards.push_back(sharded ? fmt::format("optimizer-{:05d}-of-{:05d}.safetensors", r, ranks)
                             : std::string("optimizer.safetensors"));
  std::string my_checksum;  // "file xxh64:..." of the shard this rank wrote, or empty
  if (sharded || rank == 0) {
    // The owned elements without the padding, piece after piece.
    const OptimizerState state = engine.packed_optimizer_state();
    nlohmann::json ranges = nlohmann::json::array();
    for (const OptimizerPiece& piece : engine.optimizer_pieces())
      if (piece.flat.size() != 0) ranges.push_back({piece.flat.begin, piece.flat.end});
    const std::size_t n = state.master.size();
    const std::string& shard = shards[sharded ? rank : 0];
    const std::uint64_t hash = write_safetensors((temporary / shard).string(),
                                                 {{"master", "F32", {n}, state.master.data(), n * 4},
                                                  {"adam_m", "F32", {n}, state.m.data(), n * 4},
                                                  {"adam_v", "F32", {n}, state.v.data(), n * 4}},
                                                 {{"ranges", ranges.dump()}});
    my_checksum = shard + " " + checksum_text(hash);
  }
  // Collective: rank 0 learns every shard's checksum, and every shard is written once it has them.
  const std::vector<std::string> shard_checksums = ranks_of_run.gather_to_first(my_checksum);
  if (rank == 0) {
    const ParameterLayout& layout = engine.layout();
    std::vector<TensorToWrite> tensors;
    for (const auto& e : layout.entries())
      tensors.push_back({e.name, "BF16", e.shape, weights.data() + e.offset, e.numel * sizeof(bf16)});
    nlohmann::json checksums = {
        {"model.safetensors",
         checksum_text(write_safetensors((temporary / "model.safetensors").string(), tensors, {{"format", "pt"}}))}};
    for (const std::string& entry : shard_checksums)
      if (const auto space = entry.find(' '); space != std::string::npos)
        checksums[entry.substr(0, space)] = entry.substr(space + 1);
    nlohmann::json meta = {
        {"format", kCheckpointFormat},
        {"step", step},
        {"optimizer_step", engine.optimizer_step()},
        {"model", model_json(layout.config())},
        {"parameters", layout.total()},
        {"training", checkpoint_training_section(options)},
        {"parallel", {{"ranks", ranks}, {"zero", engine.settings().zero_stage}}},
        {"optimizer_shards", shards},
        {"checksums", checksums},
        // Batches are a pure function of (seed, step): the data position and the RNG state are both this pair.
        {"data", {{"path", options.data}, {"next_step", step}}},
        {"rng", {{"seed", options.seed}, {"step", step}}},
    };
    seal_checkpoint_meta(meta);
    write_file_atomically((temporary / "meta.json").string(), meta.dump(2) + "\n");
  }
  ranks_of_run.barrier();
  std::string published = name;
  if (rank == 0) {
    published = publish_step(dir, temporary.string(), name, hook);
    // An --overwrite run replaces the earlier run's checkpoints once its own first one is in place.
    if (first_save && options.overwrite && !continues_in_place(options)) remove_other_steps(dir, published);
    prune_steps(dir, options.keep_last);
  }
  ranks_of_run.barrier();
  return (root / published).string();
}

ResumePoint load_checkpoint(const std::string& dir, DataParallelEngine& engine, const TrainOptions& options) {
  require(fs::is_directory(dir), "--resume: '{}' is not a checkpoint directory", dir);
  const std::string step_dir = (fs::path(dir) / read_latest(dir)).string();
  const std::string meta_path = (fs::path(step_dir) / "meta.json").string();
  require(fs::exists(meta_path), "checkpoint '{}': meta.json: missing file (expected the step's metadata)",
          step_dir);
  const CheckpointMeta meta = parse_checkpoint_meta(step_dir, read_file_bytes(meta_path), training_value_check);
  const ModelConfig& model = engine.layout().config();
  require(meta.model == model_json(model), "checkpoint '{}' holds another model shape: {} (this run: {})", step_dir,
          meta.model.dump(), model_json(model).dump());
  require(meta.parameters == 0 || meta.parameters == engine.layout().total(),
          "checkpoint '{}': meta.json: inconsistent (key 'parameters' is {}, but its model shape has {} parameters)",
          step_dir, meta.parameters, engine.layout().total());
  const int step = meta.step, optimizer_step = meta.optimizer_step;
  require(step <= options.steps, "checkpoint '{}' is at step {}, beyond --steps {}", step_dir, step, options.steps);
  require(optimizer_step <= step,
          "checkpoint '{}' has optimizer_step {}, expected 0 to its step {} (a step can skip its update, not add one)",
          step_dir, optimizer_step, step);

  const ParameterLayout& layout = engine.layout();
  const std::string model_path = (fs::path(step_dir) / "model.safetensors").string();
  const SafetensorsFile model_file = read_verified(model_path, "model.safetensors", meta);
  std::vector<bf16> weights(layout.total());  // [N]
  for (const auto& e : layout.entries()) {
    const TensorRead& t = expect_tensor<bf16>(model_file, model_path, e.name, "BF16", e.numel);
    require(t.shape == e.shape, "checkpoint file '{}': tensor '{}' has another shape", model_path, e.name);
    require_finite(model_path, e.name, t);
    std::memcpy(weights.data() + e.offset, t.data.data(), t.data.size());
  }

  // Each shard names its ranges; this rank copies the parts that fall into its own pieces.
  OptimizerState state = engine.optimizer_state();
  std::vector<HeldRange> held_ranges;
  for (const std::string& shard : meta.optimizer_shards) {
    const std::string path = (fs::path(step_dir) / shard).string();
    const SafetensorsFile file = read_verified(path, shard, meta);
    std::vector<std::pair<std::size_t, std::size_t>> ranges;
    try {
      if (file.metadata.count("ranges")) {
        ranges = nlohmann::json::parse(file.metadata.at("ranges")).get<decltype(ranges)>();
      } else {
        ranges = {{std::stoull(file.metadata.at("begin")), std::stoull(file.metadata.at("end"))}};
      }
    } catch (const std::exception& e) {
      fail("checkpoint file '{}' has no valid ranges in its metadata: {}", path, e.what());
    }
    std::size_t held = 0;
    for (const auto& [b, e] : ranges) {
      require(b <= e && e <= layout.total(), "checkpoint file '{}': range [{}, {}) is outside the {} parameters",
              path, b, e, layout.total());
      held += e - b;
      held_ranges.push_back({b, e, path});
    }
    const float* master = reinterpret_cast<const float*>(
        expect_tensor<float>(file, path, "master", "F32", held).data.data());
    const float* m = reinterpret_cast<const float*>(expect_tensor<float>(file, path, "adam_m", "F32", held).data.data());
    const float* v = reinterpret_cast<const float*>(expect_tensor<float>(file, path, "adam_v", "F32", held).data.data());
    for (const char* tensor : {"master", "adam_m", "adam_v"})
      require_finite(path, tensor, file.tensors.at(tensor), std::string_view(tensor) == "adam_v");
    std::size_t at = 0;  // where range [b, e) starts in the file's tensors
    for (const auto& [b, e] : ranges) {
      for (const OptimizerPiece& piece : engine.optimizer_pieces()) {
        const std::size_t lo = std::max(b, piece.flat.begin), hi = std::min(e, piece.flat.end);
        if (lo >= hi) continue;
        const std::size_t from = at + (lo - b), to = piece.at + (lo - piece.flat.begin);
        std::copy_n(master + from, hi - lo, state.master.data() + to);
        std::copy_n(m + from, hi - lo, state.m.data() + to);
        std::copy_n(v + from, hi - lo, state.v.data() + to);
      }
      at += e - b;
    }
  }
  require_exact_tiling(step_dir, held_ranges, layout.total());
  // Nothing reaches the engine before every file has passed its checks.
  engine.set_full_weights(weights.data());
  engine.set_optimizer_state(state);
  engine.restored(optimizer_step);
  return {step, optimizer_step, meta.json};
}

}  // namespace dptrain
