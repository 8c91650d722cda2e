// Checks CLI11 runs on the text of a value before converting it.
#include "dptrain/train/cli_checks.hpp"

#include <cmath>
#include <cstdlib>

namespace dptrain {

CLI::Validator finite_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0') return fmt::format("expected a number, got '{}'", text);
        if (!std::isfinite(value)) return fmt::format("must be a finite number, got {}", text);
        return {};
      },
      "FINITE");
}

CLI::Validator true_or_false() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (text == "true" || text == "false" || text == "1" || text == "0") return {};
        return fmt::format("expected true or false, got '{}'", text);
      },
      "");
}

}  // namespace dptrain
