// Checkpoints. A checkpoint directory holds one folder per saved step and a file `latest` naming the newest:
//   DIR/step-000200/model.safetensors      BF16 weights, one tensor per layout entry (PyTorch/HF readable)
//   DIR/step-000200/optimizer*.safetensors fp32 master, Adam m, Adam v: one file `optimizer.safetensors` when
//                                          every rank holds all of it (ZeRO 0), else one shard per rank
//                                          `optimizer-00001-of-00004.safetensors`; each file names the ranges of
//                                          the flat buffer it holds (metadata "ranges": [[begin, end], ...])
//   DIR/step-000200/meta.json              step (loop steps done: names the folder; a resumed run continues
//                                          after it), optimizer_step (updates taken: fewer when non-finite steps
//                                          were skipped; AdamW's bias correction counts these), model and
//                                          training settings (option_table.hpp), data position, RNG state, shards
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

// Called on every rank after loop step `step` (1-based: the number of steps done, skipped ones included)
// (collective: ZeRO-3 gathers the weights, each rank writes its shard); barrier() waits for all ranks (the folder
// exists before shards are written into it; it is renamed once all are). Returns the step folder written.
std::string save_checkpoint(const std::string& dir, DataParallelEngine& engine, const TrainOptions& options,
                            int step, const std::function<void()>& barrier = [] {});

// Where a loaded checkpoint leaves the run.
struct ResumePoint {
  int step = 0;            // loop steps done; the run continues with the next
  int optimizer_step = 0;  // updates taken (set on the engine)
  nlohmann::json meta;     // the whole meta.json
};

// Reads the latest checkpoint of dir into the engine (every rank reads) and sets the engine's optimizer step
// (checkpoints without "optimizer_step" predate skipped-step accounting: theirs equals "step"). Throws
// UserError if it is missing, damaged, or holds another model shape.
ResumePoint load_checkpoint(const std::string& dir, DataParallelEngine& engine, const TrainOptions& options);

}  // namespace dptrain
