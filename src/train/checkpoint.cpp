// Saving and restoring the training state as safetensors plus JSON metadata.
#include "dptrain/train/checkpoint.hpp"

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "dptrain/core/atomic_file.hpp"
#include "dptrain/core/error.hpp"
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

std::string save_checkpoint(const std::string& dir, DataParallelEngine& engine, const TrainOptions& options) {
  const int step = engine.optimizer_step();
  const std::string name = fmt::format("step-{:06d}", step);
  const fs::path root(dir), final_dir = root / name, temporary = root / ("." + name + ".tmp");
  std::error_code ec;
  fs::create_directories(root, ec);
  require(!ec, "cannot create checkpoint directory '{}': {}", dir, ec.message());
  fs::remove_all(temporary, ec);
  fs::create_directories(temporary, ec);
  require(!ec, "cannot create '{}': {}", temporary.string(), ec.message());

  const ParameterLayout& layout = engine.layout();
  std::vector<TensorToWrite> weights;
  for (const auto& e : layout.entries())
    weights.push_back({e.name, "BF16", e.shape, engine.weights().data() + e.offset, e.numel * sizeof(bf16)});
  write_safetensors((temporary / "model.safetensors").string(), weights, {{"format", "pt"}});

  const std::size_t N = layout.total();
  write_safetensors((temporary / "optimizer.safetensors").string(),
                    {{"master", "F32", {N}, engine.master().data(), N * 4},
                     {"adam_m", "F32", {N}, engine.adam_m().data(), N * 4},
                     {"adam_v", "F32", {N}, engine.adam_v().data(), N * 4}},
                    {{"begin", "0"}, {"end", std::to_string(N)}});

  nlohmann::json meta = {
      {"format", kFormat},
      {"step", step},
      {"model", model_json(layout.config())},
      {"parameters", N},
      {"training",
       {{"steps", options.steps}, {"batch", options.batch}, {"lr", options.lr}, {"min_lr", options.min_lr},
        {"warmup", options.warmup}, {"weight_decay", options.weight_decay}, {"grad_clip", options.grad_clip},
        {"grad_dtype", std::string(dtype_name(options.grad_dtype))}, {"allreduce", options.allreduce}}},
      // Batches are a pure function of (seed, step): the data position and the RNG state are both this pair.
      {"data", {{"path", options.data}, {"next_step", step}}},
      {"rng", {{"seed", options.seed}, {"step", step}}},
  };
  write_file_atomically((temporary / "meta.json").string(), meta.dump(2) + "\n");

  fs::remove_all(final_dir, ec);
  fs::rename(temporary, final_dir, ec);
  require(!ec, "cannot move checkpoint into place at '{}': {}", final_dir.string(), ec.message());
  write_file_atomically((root / "latest").string(), name + "\n");
  return final_dir.string();
}

nlohmann::json load_checkpoint(const std::string& dir, DataParallelEngine& engine, const TrainOptions& options) {
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
  const int step = meta.at("step").get<int>();
  require(step >= 0 && step <= options.steps, "checkpoint '{}' is at step {}, beyond --steps {}", step_dir.string(),
          step, options.steps);

  const ParameterLayout& layout = engine.layout();
  const std::string model_path = (step_dir / "model.safetensors").string();
  const SafetensorsFile weights = read_safetensors(model_path);
  for (const auto& e : layout.entries()) {
    const TensorRead& t = expect_tensor<bf16>(weights, model_path, e.name, "BF16", e.numel);
    require(t.shape == e.shape, "checkpoint file '{}': tensor '{}' has another shape", model_path, e.name);
    std::memcpy(engine.weights().data() + e.offset, t.data.data(), t.data.size());
  }
  const std::string optimizer_path = (step_dir / "optimizer.safetensors").string();
  const SafetensorsFile optimizer = read_safetensors(optimizer_path);
  const std::size_t N = layout.total();
  std::memcpy(engine.master().data(), expect_tensor<float>(optimizer, optimizer_path, "master", "F32", N).data.data(),
              N * 4);
  std::memcpy(engine.adam_m().data(), expect_tensor<float>(optimizer, optimizer_path, "adam_m", "F32", N).data.data(),
              N * 4);
  std::memcpy(engine.adam_v().data(), expect_tensor<float>(optimizer, optimizer_path, "adam_v", "F32", N).data.data(),
              N * 4);
  engine.restored(step);
  return meta;
}

}  // namespace dptrain
