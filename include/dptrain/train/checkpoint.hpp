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
//                                          and "checksums": the XXH64 of every other file of the folder
// A step folder is written under a temporary name and renamed, then `latest` is replaced atomically, so an
// interrupted save leaves the previous checkpoint intact (checkpoint_directory.hpp). A load verifies every
// checksum, that the shards' ranges cover the flat buffer exactly once and that every value is finite. A rank resuming takes the elements it owns from
// whichever shards hold them, so a run may continue at another world size or ZeRO stage.
#pragma once
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "dptrain/dp/engine.hpp"
#include "dptrain/train/checkpoint_directory.hpp"
#include "dptrain/train/options.hpp"

namespace dptrain {

// The collectives a save needs; the defaults are those of a single rank.
struct CheckpointRanks {
  // Waits for all ranks: the folder exists before shards are written into it; it is renamed once all are.
  std::function<void()> barrier = [] {};
  // Rank 0 receives every rank's text (the checksums of the shards for meta.json); the others get nothing.
  std::function<std::vector<std::string>(const std::string&)> gather_to_first = [](const std::string& text) {
    return std::vector<std::string>{text};
  };
};

// Called on every rank after loop step `step` (1-based: the number of steps done, skipped ones included)
// (collective: ZeRO-3 gathers the weights, each rank writes its shard). `first_save`: the run's first, after
// which an --overwrite run removes the earlier run's step folders; --keep-last prunes after every save. `hook`
// is publish_step's, for tests. Returns the step folder written.
std::string save_checkpoint(const std::string& dir, DataParallelEngine& engine, const TrainOptions& options,
                            int step, const CheckpointRanks& ranks = {}, bool first_save = false,
                            const std::function<void(PublishPoint)>& hook = {});

// Where a loaded checkpoint leaves the run.
struct ResumePoint {
  int step = 0;            // loop steps done; the run continues with the next
  int optimizer_step = 0;  // updates taken (set on the engine)
  nlohmann::json meta;     // the whole meta.json
};

// Reads the latest checkpoint of dir into the engine (every rank reads) and sets the engine's optimizer step
// (checkpoints without "optimizer_step" predate skipped-step accounting: theirs equals "step"). Throws
// UserError if it is missing, damaged (checksum, meta.json, tiling, non-finite values), or holds another model
// shape; the engine is changed only when every check has passed.
ResumePoint load_checkpoint(const std::string& dir, DataParallelEngine& engine, const TrainOptions& options);

}  // namespace dptrain
