// The one table of dptrain's training options. Each entry is a long flag (its TOML key is the name without the
// dashes), its help text, where its value lives in TrainOptions, and its roles: whether every rank must be
// started with the same value, and whether the value is recorded in a checkpoint's meta.json "training" section.
// The CLI11 parser, the cross-rank agreement check and the checkpoint metadata are all generated from it, so a
// new option cannot be parsed but forgotten by the other two.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dptrain/train/options.hpp"
#include "dptrain/train/toml_config.hpp"

namespace CLI {
class App;
}

namespace dptrain {

// Whether ranks may be started with different values of an option.
enum class Agreement {
  every_rank,  // a rank with another value would compute or communicate differently: refused at start-up
  per_rank,    // only changes what this rank prints, writes or how fast it runs (the table says why per entry)
};

struct TrainOption {
  std::string flag;  // "--min-lr"
  std::string help;
  Agreement agreement = Agreement::every_rank;
  bool in_checkpoint = false;  // recorded in meta.json "training" under key()
  ValueKind kind = ValueKind::text;  // the TOML value its config key takes
  // Adds the flag to a CLI11 parser, bound to the field of `options` (which must outlive the parse).
  std::function<void(CLI::App&, TrainOptions&)> add_to_parser;
  // The value as text: what the agreement check compares and prints ("0.001", "true", "bf16", "ckpt").
  std::function<std::string(const TrainOptions&)> text;
  // The value as JSON (number, string or boolean), for the checkpoint metadata.
  std::function<nlohmann::json(const TrainOptions&)> json;

  // The metadata key: the flag without its dashes, '-' read as '_' ("min_lr").
  std::string key() const;
};

// Every option of dptrain in the order `--help` lists them.
const std::vector<TrainOption>& train_option_table();

// The kind of value the option whose TOML key (flag without its dashes) is `key` takes; nullopt for no option.
std::optional<ValueKind> config_value_kind(std::string_view key);

// A value every rank must share: compared by `text`, printed as `shown` (when set) in the refusal.
struct AgreedValue {
  std::string name;   // "--save"
  std::string text;   // "ckpt"
  std::string shown = {};  // e.g. the path beside a content hash that alone is compared; empty: `text`
  const std::string& printed() const { return shown.empty() ? text : shown; }
};
// The options every rank must share, in table order.
std::vector<AgreedValue> values_every_rank_shares(const TrainOptions& options);

// The "training" section of a checkpoint's meta.json: {key(): value} of the entries marked in_checkpoint.
nlohmann::json checkpoint_training_section(const TrainOptions& options);

// What a checkpoint's recorded value of option `key` should be, where it is not (parse_checkpoint_meta's check).
std::optional<std::string> training_value_check(const std::string& key, const nlohmann::json& value);

// The recorded options whose value differs from a checkpoint's "training" section, as "--steps 80 (was 50)", in
// table order; a key the section lacks (an older checkpoint) is not compared.
std::vector<std::string> changed_since_checkpoint(const nlohmann::json& saved, const TrainOptions& options);

}  // namespace dptrain
