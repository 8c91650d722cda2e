// The --config file, read by toml++ (a complete TOML 1.0 parser) and handed to CLI11 as its flags' values. The
// project's configs are flat `key = value` lines (configs/*.toml): a table, an array or a date, a value of the
// wrong type for its option (`steps = "3"`, `lr = true`), and anything that is not valid TOML (a key given twice,
// `steps = 3 garbage`) are refused in one line naming the file, the key and its line; valid TOML numbers that CLI11's
// own reader took for text (`1_000`, `0x10`, `1e3`) are read as TOML defines them.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace dptrain {

enum class ValueKind { whole_number, number, boolean, text };

// "a whole number (e.g. 4)": what a value of that kind looks like, for messages.
std::string_view value_kind_name(ValueKind kind);

class TomlConfig : public CLI::Config {
 public:
  // `path` names the file in messages; `kind_of` gives the kind of value a key's option takes (nullopt: a key no
  // option has, passed on as text for the parser to refuse with its suggestion).
  TomlConfig(std::string path, std::function<std::optional<ValueKind>(std::string_view key)> kind_of);

  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;
  // Not used: dptrain writes no config files.
  std::string to_config(const CLI::App*, bool, bool, std::string) const override { return {}; }

  const std::string& path() const { return path_; }
  // The line of `key` in the file read last (for the parser's refusals, which name the key only); 0 if absent.
  std::size_t line_of(const std::string& key) const;

 private:
  std::string path_;
  std::function<std::optional<ValueKind>(std::string_view)> kind_of_;
  mutable std::map<std::string, std::size_t> lines_;  // key → line, of the file read last
};

}  // namespace dptrain
