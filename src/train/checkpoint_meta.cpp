// Reading and checking a checkpoint's meta.json.
#include "dptrain/train/checkpoint_meta.hpp"

#include <limits>

#include <fmt/format.h>

#include "dptrain/core/checksum.hpp"
#include "dptrain/core/error.hpp"

namespace dptrain {
namespace {

// A value as a message shows it: short, with its JSON type.
std::string shown(const nlohmann::json& value) {
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return fmt::format("a {} {}", value.type_name(), text);
}

class MetaReader {
 public:
  MetaReader(const std::string& step_dir, const nlohmann::json& json) : dir_(step_dir), json_(json) {}

  [[noreturn]] void refuse(const std::string& what, const std::string& detail) const {
    fail("checkpoint '{}': meta.json: {} ({})", dir_, what, detail);
  }

  const nlohmann::json& required(const char* key, const char* expected) const {
    auto it = json_.find(key);
    if (it == json_.end()) refuse("missing key", fmt::format("key '{}': expected {}", key, expected));
    return *it;
  }

  [[noreturn]] void wrong_type(const std::string& key, const nlohmann::json& value, const char* expected) const {
    refuse("wrong type", fmt::format("key '{}' is {}, expected {}", key, shown(value), expected));
  }

  // An integer JSON value in [low, high], else refused naming the key and the range.
  std::int64_t bounded(const std::string& key, const nlohmann::json& value, std::int64_t low,
                       std::int64_t high) const {
    const std::string expected = fmt::format("an integer from {} to {}", low, high);
    if (!value.is_number_integer()) wrong_type(key, value, expected.c_str());
    // Unsigned and signed JSON integers are each compared through their own type.
    const bool in_range = value.is_number_unsigned()
                              ? value.get<std::uint64_t>() <= std::uint64_t(high) &&
                                    std::int64_t(value.get<std::uint64_t>()) >= low
                              : value.get<std::int64_t>() >= low && value.get<std::int64_t>() <= high;
    if (!in_range)
      refuse("value out of range", fmt::format("key '{}' is {}, expected {}", key, value.dump(), expected));
    return value.get<std::int64_t>();
  }

  int integer(const char* key, const nlohmann::json& value) const {
    return int(bounded(key, value, 0, std::numeric_limits<int>::max()));
  }

 private:
  std::string dir_;
  const nlohmann::json& json_;
};

// The XXH64 that seals a meta.json: of the document without its "meta_checksum", as compact JSON text.
std::uint64_t contents_hash(const nlohmann::json& meta) {
  nlohmann::json contents = meta;
  contents.erase("meta_checksum");
  return xxh64(contents.dump());
}

// A shard name must stay inside the step folder: no separators, not "." or "..".
bool plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

}  // namespace

CheckpointMeta parse_checkpoint_meta(const std::string& step_dir, std::string_view text,
                                     const TrainingValueCheck& training_kind) {
  CheckpointMeta meta;
  try {
    meta.json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // Not only parse_error: a number beyond double's range ("7E8000") is an out_of_range error (found by fuzzing).
    // e.what() starts with the library's "[json.exception.parse_error.101] " tag: the rest is the reason.
    std::string reason = e.what();
    if (const auto end = reason.find("] "); reason.starts_with("[json.exception") && end != std::string::npos)
      reason = reason.substr(end + 2);
    fail("checkpoint '{}': meta.json: not valid JSON ({}; expected the JSON object dptrain writes)", step_dir,
         reason);
  }
  if (!meta.json.is_object())
    fail("checkpoint '{}': meta.json: wrong type (the document is {}, expected an object)", step_dir,
         shown(meta.json));
  const MetaReader read(step_dir, meta.json);

  const std::string formats = fmt::format("\"{}\" or \"{}\"", kCheckpointFormat, kCheckpointFormatUnsealed);
  const nlohmann::json& format = read.required("format", formats.c_str());
  if (!format.is_string() || (format != kCheckpointFormat && format != kCheckpointFormatUnsealed))
    read.refuse("unknown format", fmt::format("key 'format' is {}, expected {}", shown(format), formats));
  // A seal is verified whatever the format says: a format 2 document whose "format" was changed to 1 still holds
  // its meta_checksum, of contents that said 2 (format 1 never wrote the key).
  const bool sealed = format == kCheckpointFormat || meta.json.contains("meta_checksum");

  meta.step = read.integer("step", read.required("step", "an integer from 0 to 2147483647"));
  meta.optimizer_step = meta.json.contains("optimizer_step") ? read.integer("optimizer_step", meta.json["optimizer_step"])
                                                             : meta.step;

  meta.model = read.required("model", "an object of the model's shape");
  if (!meta.model.is_object()) read.wrong_type("model", meta.model, "an object of the model's shape");

  // What the run that wrote it was: informational (a load reshards to any ranks and stage), but checked, so a
  // hand-edited or foreign file is refused rather than half believed.
  if (meta.json.contains("parameters"))
    meta.parameters = std::size_t(read.bounded("parameters", meta.json["parameters"], 1,
                                               std::numeric_limits<std::int64_t>::max()));
  if (meta.json.contains("parallel")) {
    const nlohmann::json& parallel = meta.json["parallel"];
    constexpr const char* expected = "an object {\"ranks\": R, \"zero\": S}";
    if (!parallel.is_object()) read.wrong_type("parallel", parallel, expected);
    for (const char* key : {"ranks", "zero"})
      if (!parallel.contains(key))
        read.refuse("missing key", fmt::format("key 'parallel.{}': expected {}", key, expected));
    read.bounded("parallel.ranks", parallel["ranks"], 1, std::numeric_limits<int>::max());
    read.bounded("parallel.zero", parallel["zero"], 0, 3);
  }

  // The options of the run that wrote it (what a resume names as changed), each as `training_kind` expects; a key
  // it knows nothing of (a later version's) is left alone.
  if (meta.json.contains("training")) {
    const nlohmann::json& training = meta.json["training"];
    if (!training.is_object()) read.wrong_type("training", training, "an object of option values");
    if (training_kind)
      for (const auto& [key, value] : training.items())
        if (const std::optional<std::string> expected = training_kind(key, value))
          read.wrong_type("training." + key, value, expected->c_str());
  }
  // Absent in checkpoints of one file (ZeRO 0): the single optimizer.safetensors.
  meta.optimizer_shards = {"optimizer.safetensors"};
  if (meta.json.contains("optimizer_shards")) {
    const nlohmann::json& shards = meta.json["optimizer_shards"];
    constexpr const char* expected = "a non-empty array of file names";
    if (!shards.is_array() || shards.empty()) read.wrong_type("optimizer_shards", shards, expected);
    meta.optimizer_shards.clear();
    for (std::size_t i = 0; i < shards.size(); ++i) {
      const std::string key = fmt::format("optimizer_shards[{}]", i);
      if (!shards[i].is_string()) read.wrong_type(key, shards[i], "a file name");
      const std::string name = shards[i].get<std::string>();
      if (!plain_file_name(name))
        read.refuse("bad file name", fmt::format("key '{}' is \"{}\", expected a file name inside the step folder",
                                                 key, name));
      meta.optimizer_shards.push_back(name);
    }
  }

  // Absent in checkpoints written before checksums were recorded (format 1): nothing to verify against.
  if (sealed) read.required("checksums", "an object of file name to \"xxh64:...\"");
  if (meta.json.contains("checksums")) {
    const nlohmann::json& checksums = meta.json["checksums"];
    if (!checksums.is_object()) read.wrong_type("checksums", checksums, "an object of file name to \"xxh64:...\"");
    for (const auto& [name, value] : checksums.items()) {
      const std::string key = fmt::format("checksums.{}", name);
      if (!value.is_string()) read.wrong_type(key, value, "\"xxh64:\" and 16 hex digits");
      const auto hash = parse_checksum_text(value.get<std::string>());
      if (!hash) read.refuse("bad checksum", fmt::format("key '{}' is {}, expected \"xxh64:\" and 16 hex digits",
                                                         key, shown(value)));
      meta.checksums[name] = *hash;
    }
    for (const std::string& name : meta.optimizer_shards)
      if (!meta.checksums.count(name))
        read.refuse("missing checksum", fmt::format("key 'checksums.{}': expected the checksum of every file", name));
    if (!meta.checksums.count("model.safetensors"))
      read.refuse("missing checksum", "key 'checksums.model.safetensors': expected the checksum of every file");
  }
  // Last: a document whose structure is wrong is named by what is wrong, not by its checksum.
  if (sealed) {
    const nlohmann::json& recorded = read.required("meta_checksum", "\"xxh64:\" and 16 hex digits");
    const auto expected = recorded.is_string() ? parse_checksum_text(recorded.get<std::string>()) : std::nullopt;
    if (!expected)
      read.refuse("bad checksum",
                  fmt::format("key 'meta_checksum' is {}, expected \"xxh64:\" and 16 hex digits", shown(recorded)));
    if (const std::uint64_t actual = contents_hash(meta.json); actual != *expected)
      fail(
          "checkpoint '{}': meta.json is damaged: xxh64 {:016x} of its contents, expected {:016x} (recorded in it as "
          "meta_checksum when it was written)",
          step_dir, actual, *expected);
  }
  // The position in the data and the generator: both are the step (batches are a function of seed and step). After
  // the seal: in a sealed document a flipped digit is damage, named as such.
  for (const auto& [section, key] : {std::pair{"data", "next_step"}, {"rng", "step"}}) {
    if (!meta.json.contains(section) || !meta.json[section].is_object() || !meta.json[section].contains(key))
      continue;
    const std::string name = fmt::format("{}.{}", section, key);
    if (read.integer(name.c_str(), meta.json[section][key]) != meta.step)
      read.refuse("inconsistent", fmt::format("key '{}' is {}, but the checkpoint is at step {}", name,
                                              meta.json[section][key].dump(), meta.step));
  }
  return meta;
}

void seal_checkpoint_meta(nlohmann::json& meta) { meta["meta_checksum"] = checksum_text(contents_hash(meta)); }

}  // namespace dptrain
