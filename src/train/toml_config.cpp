// A TOML config as CLI11's flag values, through toml++.
#include "dptrain/train/toml_config.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <sstream>

#include "dptrain/core/error.hpp"

namespace dptrain {

namespace {

// How the file wrote the value, for messages: `"3"`, `3.5`, `true`.
std::string shown(const toml::node& node) {
  if (const auto* s = node.as_string()) return fmt::format("\"{}\"", s->get());
  std::ostringstream text;
  node.visit([&text](const auto& value) { text << value; });
  return text.str();
}

}  // namespace

std::string_view value_kind_name(ValueKind kind) {
  switch (kind) {
    case ValueKind::whole_number:
      return "a whole number (e.g. 4)";
    case ValueKind::number:
      return "a number (e.g. 0.001)";
    case ValueKind::boolean:
      return "true or false";
    case ValueKind::text:
      return "a string in quotes (e.g. \"ring\")";
  }
  return "";
}

TomlConfig::TomlConfig(std::string path, std::function<std::optional<ValueKind>(std::string_view key)> kind_of)
    : path_(std::move(path)), kind_of_(std::move(kind_of)) {}

std::vector<CLI::ConfigItem> TomlConfig::from_config(std::istream& input) const {
  toml::table table;
  try {
    table = toml::parse(input, std::string_view(path_));
  } catch (const toml::parse_error& e) {
    // toml++ heads some descriptions with the construct it was in: "Error while parsing key-value pair: ".
    std::string_view what = e.description();
    if (const auto colon = what.find(": "); what.starts_with("Error while parsing") && colon != what.npos)
      what.remove_prefix(colon + 2);
    fail("--config {}: not valid TOML at line {}, column {}: {}", path_, e.source().begin.line,
         e.source().begin.column, what);
  }
  std::vector<CLI::ConfigItem> items;
  lines_.clear();
  for (const auto& [toml_key, node] : table) {
    const std::string key(toml_key.str());
    const std::size_t line = toml_key.source().begin.line;
    lines_[key] = line;
    if (node.is_table())
      fail("--config {}: '{}' (line {}) is a table; the config holds flat keys, one value each (e.g. `layers = 4`)",
           path_, key, line);
    if (node.is_array())
      fail("--config {}: key '{}' (line {}) is an array ({}); give it one value (e.g. `layers = 4`)", path_, key,
           line, shown(node));
    // The value as the text CLI11 converts, and its kind (an integer is a number too).
    std::string text;
    ValueKind given = ValueKind::text;
    if (const auto* s = node.as_string()) {
      text = s->get();
    } else if (const auto* i = node.as_integer()) {
      text = fmt::format("{}", i->get());
      given = ValueKind::whole_number;
    } else if (const auto* f = node.as_floating_point()) {
      text = fmt::format("{}", f->get());
      given = ValueKind::number;
    } else if (const auto* b = node.as_boolean()) {
      text = b->get() ? "true" : "false";
      given = ValueKind::boolean;
    } else {
      fail("--config {}: key '{}' (line {}) is a date or time ({}); no option takes one", path_, key, line,
           shown(node));
    }
    const std::optional<ValueKind> kind = kind_of_(key);
    if (kind && *kind != given && !(*kind == ValueKind::number && given == ValueKind::whole_number))
      fail("--config {}: key '{}' (line {}) is {}; expected {}", path_, key, line, shown(node),
           value_kind_name(*kind));
    CLI::ConfigItem item;
    item.name = key;
    item.inputs = {text};
    items.push_back(std::move(item));
  }
  return items;
}

std::size_t TomlConfig::line_of(const std::string& key) const {
  const auto it = lines_.find(key);
  return it == lines_.end() ? 0 : it->second;
}

}  // namespace dptrain
