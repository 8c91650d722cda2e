// Checks CLI11 runs on the text of a value before converting it, so that a bad value gets a line saying what is
// accepted (CLI11 alone says "Could not convert: --iters = 1.5"). Shared by dptrain's option table, dpbench and
// dpmodel.
#pragma once
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <limits>
#include <string>
#include <type_traits>

namespace dptrain {

// A finite number: inf passes range checks written as `x >= 0`, and nan fails them with a confusing message.
CLI::Validator finite_number();

// true or false (also 1 or 0) for a flag given a value (--quiet=false, `quiet = true` in a config): CLI11 alone
// takes any integer, -1 as false and 2 as true.
CLI::Validator true_or_false();

// A whole number its type holds, at least `minimum`: CLI11 alone would clamp 2^64 to 2^64 − 1 and wrap -1 to it.
// Given as a transform (Option::transform), it also rewrites the text as plain decimal, which CLI11 then converts:
// alone, CLI11 reads "010" as octal 8 and refuses "08".
template <typename T>
CLI::Validator whole_number(T minimum = std::numeric_limits<T>::min()) {
  static_assert(std::is_integral_v<T>);
  return CLI::Validator(
      [minimum](std::string& text) -> std::string {
        if (const std::size_t first = text.find_first_not_of(" \t");
            std::is_unsigned_v<T> && first != std::string::npos && text[first] == '-')
          return fmt::format("must be a non-negative integer, got {}", text);
        T value{};
        const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (error == std::errc::result_out_of_range && end == text.data() + text.size()) {
          // Without a minimum of the option's own, the type's would mislead (--steps is no count from -2^31).
          if (std::is_signed_v<T> && minimum == std::numeric_limits<T>::min())
            return text.starts_with('-')
                       ? fmt::format("{} is out of range (at least {})", text, std::numeric_limits<T>::min())
                       : fmt::format("{} is out of range (at most {})", text, std::numeric_limits<T>::max());
          return fmt::format("{} is out of range (expected a whole number from {} to {})", text, minimum,
                             std::numeric_limits<T>::max());
        }
        if (error != std::errc() || end != text.data() + text.size())
          return fmt::format("expected a whole number, got '{}'", text);
        if (value < minimum)
          return fmt::format("expected a whole number from {} to {}, got {}", minimum, std::numeric_limits<T>::max(),
                             text);
        text = fmt::format("{}", value);
        return {};
      },
      "INTEGER");
}

}  // namespace dptrain
