// Checkpoints. A checkpoint directory holds one folder per saved step and a file `latest` naming the newest:
//   DIR/step-000200/model.safetensors      BF16 weights, one tensor per layout entry (PyTorch/HF readable)
//   DIR/step-000200/optimizer*.safetensors fp32 master, Adam m, Adam v: one file `optimizer.safetensors` when
//                                          every rank holds all of it (ZeRO 0), else one shard per rank
//                                          `optimizer-00001-of-00004.safetensors`; each file names the ranges of
//                                          the flat buffer it holds (metadata "ranges": [[begin, end], ...])
//   DIR/step-000200/meta.json              step, model and training settings, data position, RNG state, shards
// A step folder is written under a temporary name and renamed, then `latest` is replaced atomically, so an
// interrupted save leaves the previous checkpoint intact. A rank resuming takes the elements it owns from
// whichever shards hold them, so a run may continue at another world size or ZeRO stage.
#pragma once
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "dptrain/dp/engine.hpp"
#include "dptrain/train/options.hpp"

namespace dptrain {

// Called on every rank (collective: ZeRO-3 gathers the weights, each rank writes its shard); barrier() waits for
// all ranks (the folder exists before shards are written into it; it is renamed once all are). Returns the step
// folder written.
std::string save_checkpoint(const std::string& dir, DataParallelEngine& engine, const TrainOptions& options,
                            const std::function<void()>& barrier = [] {});

// Reads the latest checkpoint of dir into the engine (every rank reads). Throws UserError if it is missing,
// damaged, or holds another model shape. Returns its metadata.
nlohmann::json load_checkpoint(const std::string& dir, DataParallelEngine& engine, const TrainOptions& options);

}  // namespace dptrain
