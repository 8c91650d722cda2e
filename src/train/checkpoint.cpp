// Saving and restoring the training state as safetensors plus JSON metadata.
#include "dptrain/train/checkpoint.hpp"

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "dptrain/core/atomic_file.hpp"
#include "dptrain/core/error.hpp"
#include "dptrain/train/option_table.hpp"
#include "dptrain/train/safetensors.hpp"

namespace dptrain {
namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "dptrain-checkpoint-1";

nlohmann::json model_json(const ModelConfig& m) {
  return {{"vocab", m.vocab}, {"seq", m.seq}, {"layers", m.layers}, {"width", m.width}, {"heads", m.heads}};
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  require(bool(in), "cannot read '{}'", path.string());
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
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

}  // namespace

std::string save_checkpoint(const std::string& dir, DataParallelEngine& engine, const TrainOptions& options,
                            int step, const std::function<void()>& barrier) {
  const int rank = engine.rank(), ranks = engine.ranks();
  const bool sharded = engine.settings().zero_stage > 0 && ranks > 1;
  const std::string name = fmt::format("step-{:06d}", step);
  const fs::path root(dir), final_dir = root / name, temporary = root / ("." + name + ".tmp");
  const std::vector<bf16> weights = engine.full_weights();  // [N]
  std::error_code ec;
  if (rank == 0) {
    fs::create_directories(root, ec);
    require(!ec, "cannot create checkpoint directory '{}': {}", dir, ec.message());
    fs::remove_all(temporary, ec);
    fs::create_directories(temporary, ec);
    require(!ec, "cannot create '{}': {}", temporary.string(), ec.message());
  }
  barrier();

  std::vector<std::string> shards;
  for (int r = 0; r < (sharded ? ranks : 1); ++r)
    shards.push_back(sharded ? fmt::format("optimizer-{:05d}-of-{:05d}.safetensors", r, ranks)
                             : std::string("optimizer.safetensors"));
  if (sharded || rank == 0) {
    // The owned elements without the padding, piece after piece.
    std::vector<float> master, m, v;
    const OptimizerState state = engine.optimizer_state();
    nlohmann::json ranges = nlohmann::json::array();
    for (const OptimizerPiece& piece : engine.optimizer_pieces()) {
      if (piece.flat.size() == 0) continue;
      ranges.push_back({piece.flat.begin, piece.flat.end});
      for (auto [to, from] : {std::pair{&master, &state.master}, {&m, &state.m}, {&v, &state.v}})
        to->insert(to->end(), from->begin() + std::ptrdiff_t(piece.at),
                   from->begin() + std::ptrdiff_t(piece.at + piece.flat.size()));
    }
    const std::size_t n = master.size();
    write_safetensors((temporary / shards[sharded ? rank : 0]).string(),
                      {{"master", "F32", {n}, master.data(), n * 4},
                       {"adam_m", "F32", {n}, m.data(), n * 4},
                       {"adam_v", "F32", {n}, v.data(), n * 4}},
                      {{"ranges", ranges.dump()}});
  }
  if (rank == 0) {
    const ParameterLayout& layout = engine.layout();
    std::vector<TensorToWrite> tensors;
    for (const auto& e : layout.entries())
      tensors.push_back({e.name, "BF16", e.shape, weights.data() + e.offset, e.numel * sizeof(bf16)});
    write_safetensors((temporary / "model.safetensors").string(), tensors, {{"format", "pt"}});
    nlohmann::json meta = {
        {"format", kFormat},
        {"step", step},
        {"optimizer_step", engine.optimizer_step()},
        {"model", model_json(layout.config())},
        {"parameters", layout.total()},
        {"training", checkpoint_training_section(options)},
        {"parallel", {{"ranks", ranks}, {"zero", engine.settings().zero_stage}}},
        {"optimizer_shards", shards},
        // Batches are a pure function of (seed, step): the data position and the RNG state are both this pair.
        {"data", {{"path", options.data}, {"next_step", step}}},
        {"rng", {{"seed", options.seed}, {"step", step}}},
    };
    write_file_atomically((temporary / "meta.json").string(), meta.dump(2) + "\n");
  }
  barrier();
  if (rank == 0) {
    fs::remove_all(final_dir, ec);
    fs::rename(temporary, final_dir, ec);
    require(!ec, "cannot move checkpoint into place at '{}': {}", final_dir.string(), ec.message());
    write_file_atomically((root / "latest").string(), name + "\n");
  }
  barrier();
  return final_dir.string();
}

ResumePoint load_checkpoint(const std::string& dir, DataParallelEngine& engine, const TrainOptions& options) {
  const fs::path root(dir);
  require(fs::is_directory(root), "--resume: '{}' is not a checkpoint directory", dir);
  require(fs::exists(root / "latest"), "--resume: '{}' has no 'latest' file: no checkpoint was completed there",
          dir);
  std::string name = read_text(root / "latest");
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  const fs::path step_dir = root / name;
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(read_text(step_dir / "meta.json"));
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint '{}' has damaged metadata: {}", step_dir.string(), e.what());
  }
  require(meta.value("format", "") == kFormat, "checkpoint '{}' has format '{}', expected '{}'",
          step_dir.string(), meta.value("format", "?"), kFormat);
  const ModelConfig& model = engine.layout().config();
  require(meta["model"] == model_json(model), "checkpoint '{}' holds another model shape: {} (this run: {})",
          step_dir.string(), meta["model"].dump(), model_json(model).dump());
  int step = 0, optimizer_step = 0;
  try {
    step = meta.at("step").get<int>();
    optimizer_step = meta.value("optimizer_step", step);
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint '{}' has damaged metadata: {}", step_dir.string(), e.what());
  }
  require(step >= 0 && step <= options.steps, "checkpoint '{}' is at step {}, beyond --steps {}", step_dir.string(),
          step, options.steps);
  require(optimizer_step >= 0 && optimizer_step <= step,
          "checkpoint '{}' has optimizer_step {}, expected 0 to its step {} (a step can skip its update, not add one)",
          step_dir.string(), optimizer_step, step);

  const ParameterLayout& layout = engine.layout();
  const std::string model_path = (step_dir / "model.safetensors").string();
  const SafetensorsFile model_file = read_safetensors(model_path);
  std::vector<bf16> weights(layout.total());  // [N]
  for (const auto& e : layout.entries()) {
    const TensorRead& t = expect_tensor<bf16>(model_file, model_path, e.name, "BF16", e.numel);
    require(t.shape == e.shape, "checkpoint file '{}': tensor '{}' has another shape", model_path, e.name);
    std::memcpy(weights.data() + e.offset, t.data.data(), t.data.size());
  }
  engine.set_full_weights(weights.data());

  // Each shard names its ranges; this rank copies the parts that fall into its own pieces.
  OptimizerState state = engine.optimizer_state();
  std::size_t wanted = 0, found = 0;
  for (const OptimizerPiece& piece : engine.optimizer_pieces()) wanted += piece.flat.size();
  const nlohmann::json shards = meta.value("optimizer_shards", nlohmann::json::array({"optimizer.safetensors"}));
  for (const auto& shard : shards) {
    const std::string path = (step_dir / shard.get<std::string>()).string();
    const SafetensorsFile file = read_safetensors(path);
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
    }
    const float* master = reinterpret_cast<const float*>(
        expect_tensor<float>(file, path, "master", "F32", held).data.data());
    const float* m = reinterpret_cast<const float*>(expect_tensor<float>(file, path, "adam_m", "F32", held).data.data());
    const float* v = reinterpret_cast<const float*>(expect_tensor<float>(file, path, "adam_v", "F32", held).data.data());
    std::size_t at = 0;  // where range [b, e) starts in the file's tensors
    for (const auto& [b, e] : ranges) {
      for (const OptimizerPiece& piece : engine.optimizer_pieces()) {
        const std::size_t lo = std::max(b, piece.flat.begin), hi = std::min(e, piece.flat.end);
        if (lo >= hi) continue;
        const std::size_t from = at + (lo - b), to = piece.at + (lo - piece.flat.begin);
        std::copy_n(master + from, hi - lo, state.master.data() + to);
        std::copy_n(m + from, hi - lo, state.m.data() + to);
        std::copy_n(v + from, hi - lo, state.v.data() + to);
        found += hi - lo;
      }
      at += e - b;
    }
  }
  require(found == wanted,
          "checkpoint '{}': its optimizer shards hold {} of the {} elements this rank needs (a shard is missing or "
          "overlaps another)",
          step_dir.string(), found, wanted);
  engine.set_optimizer_state(state);
  engine.restored(optimizer_step);
  return {step, optimizer_step, meta};
}

}  // namespace dptrain
