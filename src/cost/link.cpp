// Link presets and the parser of `--link` values (`alpha=5us,bw=450GB/s` or a preset name).
#include "dptrain/cost/link.hpp"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <cmath>

#include "dptrain/core/error.hpp"

namespace dptrain::cost {
namespace {

// docs/systems-model.md "Presets": per GPU, one direction.
constexpr std::array kLinkPresets = {
    LinkPreset{"nvlink-h100", "NVLink", Link{5e-6, 450e9}},     // NVLink 900 GB/s total
    LinkPreset{"ib-400g", "InfiniBand", Link{10e-6, 50e9}},     // 400 Gb/s per GPU
    LinkPreset{"wan-100g", "WAN", Link{10e-6, 12.5e9}},         // 100 GbE
};

constexpr std::string_view kSpecSyntax =
    "alpha=<time>,bw=<bandwidth>[,gamma=<time>/B or <bandwidth>], e.g. alpha=5us,bw=450GB/s";

std::string_view trim(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  return text;
}

// A unit converts to SI as value·multiplier/divisor. Dividing by 10^6 for "us" rather than multiplying by 1e-6
// keeps "5us" the same double as the literal 5e-6, so a spec equal to a preset gives the preset's numbers.
struct Unit {
  std::string_view name;
  double multiplier;
  double divisor;
};

// A finite number, optionally a space, then one of `units`.
double parse_quantity(std::string_view text, std::span<const Unit> units, std::string_view what,
                      std::string_view accepted) {
  std::string_view body = trim(text);
  double value = 0;
  auto [end, error] = std::from_chars(body.data(), body.data() + body.size(), value);
  require(error != std::errc::result_out_of_range, "bad {} '{}': the number is beyond a double's range", what, text);
  if (error == std::errc() && std::isfinite(value)) {
    std::string_view unit_name = trim(std::string_view(end, body.data() + body.size() - end));
    for (const Unit& unit : units) {
      if (unit_name == unit.name) return value * unit.multiplier / unit.divisor;
    }
  }
  fail("bad {} '{}': expected a number and one of {}", what, text, accepted);
}

}  // namespace

std::span<const LinkPreset> link_presets() { return kLinkPresets; }

const LinkPreset* find_link_preset(std::string_view name) {
  for (const LinkPreset& preset : kLinkPresets) {
    if (preset.name == name) return &preset;
  }
  return nullptr;
}

double parse_seconds(std::string_view text) {
  static constexpr Unit kUnits[] = {{"s", 1, 1}, {"ms", 1, 1e3}, {"us", 1, 1e6}, {"µs", 1, 1e6}, {"ns", 1, 1e9}};
  double seconds = parse_quantity(text, kUnits, "time", "s, ms, us, ns (e.g. 5us)");
  require(seconds >= 0, "bad time '{}': must not be negative", text);
  return seconds;
}

double parse_bandwidth(std::string_view text) {
  // Bytes and bits per second in powers of 10^3: GB/s is 10^9 bytes, Gb/s is 10^9 bits.
  static constexpr Unit kUnits[] = {{"B/s", 1, 1},   {"KB/s", 1e3, 1}, {"MB/s", 1e6, 1}, {"GB/s", 1e9, 1},
                                    {"TB/s", 1e12, 1}, {"b/s", 1, 8},    {"Kb/s", 1e3, 8}, {"Mb/s", 1e6, 8},
                                    {"Gb/s", 1e9, 8},  {"Tb/s", 1e12, 8}};
  double bytes_per_second =
      parse_quantity(text, kUnits, "bandwidth", "B/s, KB/s, MB/s, GB/s, TB/s or bits b/s ... Tb/s (e.g. 450GB/s)");
  require(bytes_per_second > 0, "bad bandwidth '{}': must be positive", text);
  return bytes_per_second;
}

Link parse_link_spec(std::string_view text) {
  bool have_alpha = false, have_bandwidth = false, have_gamma = false;
  Link link;
  std::string_view rest = text;
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    require(comma == std::string_view::npos || !rest.empty(),
            "bad link '{}': nothing after its last comma; expected {}", text, kSpecSyntax);
    std::size_t equals = item.find('=');
    require(equals != std::string_view::npos, "bad link '{}': '{}' is not key=value; expected {}", text, item,
            kSpecSyntax);
    std::string_view key = trim(item.substr(0, equals)), value = item.substr(equals + 1);
    try {
      if (key == "alpha" && !have_alpha) {
        link.alpha_s = parse_seconds(value);
        have_alpha = true;
      } else if (key == "gamma" && !have_gamma) {
        // Seconds per byte added ("0.07ns/B"), or the rate of adding ("15GB/s").
        const bool per_byte = value.size() > 2 && value.substr(value.size() - 2) == "/B";
        link.gamma_s_per_byte = per_byte ? parse_seconds(value.substr(0, value.size() - 2))
                                         : 1 / parse_bandwidth(value);
        have_gamma = true;
      } else if ((key == "bw" || key == "bandwidth") && !have_bandwidth) {
        link.bandwidth_Bps = parse_bandwidth(value);
        have_bandwidth = true;
      } else {
        fail("unknown or repeated key '{}'", key);
      }
    } catch (const UserError& error) {
      fail("bad link '{}': {}; expected {}", text, error.what(), kSpecSyntax);
    }
  }
  require(have_alpha && have_bandwidth, "bad link '{}': needs both alpha and bw; expected {}", text, kSpecSyntax);
  return link;
}

Link parse_link(std::string_view text) {
  if (const LinkPreset* preset = find_link_preset(text)) return preset->link;
  if (text.find('=') == std::string_view::npos) {
    std::string names;
    for (const LinkPreset& preset : kLinkPresets) names += fmt::format("{}{}", names.empty() ? "" : ", ", preset.name);
    fail("unknown link '{}': expected a preset ({}), a link.json file (as dpbench --fit writes) or {}", text, names,
         kSpecSyntax);
  }
  return parse_link_spec(text);
}

namespace {

// The value in the largest of `units` (largest first) in which it is ≥ 1, shortest form: "5 µs", "12.5 GB/s".
std::string in_largest_unit(double value, std::span<const Unit> units) {
  for (const Unit& unit : units)
    if (std::abs(value) * unit.divisor / unit.multiplier >= 1 || &unit == &units.back())
      return fmt::format("{:g} {}", value * unit.divisor / unit.multiplier, unit.name);
  return {};  // unreachable: the last unit always prints
}

}  // namespace

std::string describe(const Link& link) {
  static constexpr Unit kTimes[] = {{"s", 1, 1}, {"ms", 1, 1e3}, {"µs", 1, 1e6}, {"ns", 1, 1e9}};
  static constexpr Unit kRates[] = {{"GB/s", 1e9, 1}, {"MB/s", 1e6, 1}, {"KB/s", 1e3, 1}, {"B/s", 1, 1}};
  std::string text = fmt::format("α = {}, B = {}", link.alpha_s == 0 ? "0" : in_largest_unit(link.alpha_s, kTimes),
                                 in_largest_unit(link.bandwidth_Bps, kRates));
  if (link.gamma_s_per_byte > 0) text += fmt::format(", γ = {:g} ns/B", link.gamma_s_per_byte * 1e9);
  return text;
}

}  // namespace dptrain::cost
