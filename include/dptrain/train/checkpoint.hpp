// Checkpoints. A checkpoint directory holds one folder per saved step and a file `latest` naming the newest:
//   DIR/step-000200/model.safetensors      BF16 weights, one tensor per layout entry (PyTorch/HF readable)
//   DIR/step-000200/optimizer.safetensors  fp32 master, Adam m, Adam v over the flat buffer
//   DIR/step-000200/meta.json              step, model and training settings, data position, RNG state
// A step folder is written under a temporary name and renamed, then `latest` is replaced atomically, so an
// interrupted save leaves the previous checkpoint intact.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "dptrain/dp/engine.hpp"
#include "dptrain/train/options.hpp"

namespace dptrain {

// Called on rank 0 only (the state is replicated); returns the step folder written.
std::string save_checkpoint(const std::string& dir, DataParallelEngine& engine, const TrainOptions& options);

// Reads the latest checkpoint of dir into the engine (every rank reads). Throws UserError if it is missing,
// damaged, or holds another model shape. Returns its metadata.
nlohmann::json load_checkpoint(const std::string& dir, DataParallelEngine& engine, const TrainOptions& options);

}  // namespace dptrain
