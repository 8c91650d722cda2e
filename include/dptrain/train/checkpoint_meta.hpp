// Reading a checkpoint's meta.json: every key the loader uses is checked for presence and type here, so damaged
// metadata is refused with one line naming the checkpoint, the key, what it holds and what is accepted
// (`checkpoint '<dir>': meta.json: wrong type (key 'step' is a string "5", expected an integer)`), never with
// a bare JSON library message.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace dptrain {

// What a save writes: format 2 seals meta.json with its own checksum ("meta_checksum") beside the files' ones, and
// a reader requires both. Format 1 (no meta_checksum; "checksums" absent in the oldest) is still read as it was.
inline constexpr const char* kCheckpointFormat = "dptrain-checkpoint-2";
inline constexpr const char* kCheckpointFormatUnsealed = "dptrain-checkpoint-1";

struct CheckpointMeta {
  int step = 0;            // loop steps done
  int optimizer_step = 0;  // updates taken ("step" when absent: written before skipped steps were counted)
  nlohmann::json model;    // the model's shape, an object
  std::size_t parameters = 0;  // the element count the writer recorded; 0 when absent
  std::vector<std::string> optimizer_shards;         // plain file names inside the step folder
  std::map<std::string, std::uint64_t> checksums;    // file name -> XXH64; empty in checkpoints that predate them
  nlohmann::json json;                               // the whole document
};

// For a value of meta.json's "training" object: what its key's option expects ("a whole number (e.g. 4)") where the
// value is not that, nullopt where it is or the key is no option's.
using TrainingValueCheck =
    std::function<std::optional<std::string>(const std::string& key, const nlohmann::json& value)>;

// Parses and checks the text of `step_dir`/meta.json, the "training" values with `training_kind` where given.
// Throws UserError (any input: fuzzed).
CheckpointMeta parse_checkpoint_meta(const std::string& step_dir, std::string_view text,
                                     const TrainingValueCheck& training_kind = nullptr);

// Sets meta["meta_checksum"] to the XXH64 of the document without that key, as compact JSON text (nlohmann::json
// keeps keys sorted, and its numbers read back to the same text): a flipped byte anywhere in meta.json — a step, a
// key's name — no longer matches it.
void seal_checkpoint_meta(nlohmann::json& meta);

}  // namespace dptrain
