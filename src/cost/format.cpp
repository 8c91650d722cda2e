// Number formatting of the systems model and the Markdown table writer.
#include "dptrain/cost/format.hpp"

#include <fmt/format.h>

#include <cmath>
#include <span>
#include <string_view>

#include "dptrain/core/error.hpp"

namespace dptrain::cost {
namespace {

struct Unit {
  std::string_view name;
  double factor;  // SI value of one unit
  int decimals;
};

// The largest unit in which the value, rounded as printed, is still ≥ 1; so 0.99996 s prints "1.00 s", not
// "1000.0 ms". Values below the smallest unit print in it.
const Unit& unit_for(double value, std::span<const Unit> units) {
  for (const Unit& unit : units) {
    const double scaled = value / unit.factor, rounding = std::pow(10.0, unit.decimals);
    if (std::abs(std::round(scaled * rounding) / rounding) >= 1) return unit;
  }
  return units.back();
}

// A value of a billion units or more (a step of 1e290 s for a near-zero η) in exponent form, not in 300 digits.
std::string format_in(double value, const Unit& unit) {
  const double scaled = value / unit.factor;
  if (std::abs(scaled) >= 1e9) return fmt::format("{:.3e} {}", scaled, unit.name);
  return fmt::format("{:.{}f} {}", scaled, unit.decimals, unit.name);
}

std::string format_with_units(double value, std::span<const Unit> units) {
  return format_in(value, unit_for(value, units));
}

constexpr Unit kByteUnits[] = {{"GB", 1e9, 2}, {"MB", 1e6, 2}, {"KB", 1e3, 2}, {"B", 1, 0}};

}  // namespace

std::string format_seconds(double seconds) {
  static constexpr Unit kUnits[] = {{"s", 1, 2}, {"ms", 1e-3, 1}, {"µs", 1e-6, 1}, {"ns", 1e-9, 1}};
  if (seconds == 0) return "0 s";
  return format_with_units(seconds, kUnits);
}

std::string format_bytes(double bytes) { return format_with_units(bytes, kByteUnits); }

std::vector<std::string> format_bytes_in_one_unit(std::span<const double> bytes) {
  double smallest = 0;
  for (double b : bytes)
    if (b != 0 && (smallest == 0 || std::abs(b) < smallest)) smallest = std::abs(b);
  const Unit& unit = unit_for(smallest == 0 ? 1.0 : smallest, kByteUnits);  // all zero: bytes
  std::vector<std::string> texts;
  // An exact zero (nothing sent on one GPU) as "0 GB", not a rounded-looking "0.00 GB".
  for (double b : bytes) texts.push_back(b == 0 ? fmt::format("0 {}", unit.name) : format_in(b, unit));
  return texts;
}

std::string format_flops(double flops) {
  static constexpr Unit kUnits[] = {{"EFLOP", 1e18, 2}, {"PFLOP", 1e15, 2}, {"TFLOP", 1e12, 2}, {"GFLOP", 1e9, 2},
                                    {"MFLOP", 1e6, 2},  {"kFLOP", 1e3, 2},  {"FLOP", 1, 0}};
  return format_with_units(flops, kUnits);
}

std::string format_percent(double fraction) { return fmt::format("{:.1f}%", 100 * fraction); }

std::string format_count(std::int64_t count) {
  const std::string digits = std::to_string(count < 0 ? -count : count);
  std::string grouped = count < 0 ? "-" : "";
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) grouped += ',';
    grouped += digits[i];
  }
  return grouped;
}

MarkdownTable::MarkdownTable(std::vector<std::string> header) : header_(std::move(header)) {}

void MarkdownTable::add_row(std::vector<std::string> cells) {
  DP_ASSERT(cells.size() == header_.size());
  rows_.push_back(std::move(cells));
}

std::string MarkdownTable::str() const {
  auto line = [](const std::vector<std::string>& cells) {
    return fmt::format("| {} |\n", fmt::join(cells, " | "));
  };
  std::string text = line(header_);
  text += "|";
  for (std::size_t i = 0; i < header_.size(); ++i) text += "---|";
  text += '\n';
  for (const auto& row : rows_) text += line(row);
  return text;
}

}  // namespace dptrain::cost
