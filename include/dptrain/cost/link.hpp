// The α–β link: sending n bytes costs α + n/B (docs/systems-model.md "Links"), the link presets, and the parser for
// `--link` values such as `alpha=5us,bw=450GB/s`. Units: seconds and bytes per second, 10^9 bytes per GB.
#pragma once
#include <span>
#include <string>
#include <string_view>

namespace dptrain::cost {

struct Link {
  double alpha_s = 0;        // α: fixed cost of one message, seconds
  double bandwidth_Bps = 0;  // B: one-direction bandwidth per rank, bytes per second
  // γ: seconds per byte a rank adds into its accumulator (the reduction's own cost, on the rank's cores). Zero in
  // the presets and in docs/systems-model.md's formulas, where the adds are taken to hide behind the transfer.
  double gamma_s_per_byte = 0;

  // α + n/B: the time to send one message of `bytes` bytes.
  double message_seconds(double bytes) const { return alpha_s + bytes / bandwidth_Bps; }
  bool operator==(const Link&) const = default;
};

struct LinkPreset {
  std::string_view name;   // what `--link` accepts: "nvlink-h100"
  std::string_view where;  // how a table names it: "NVLink"
  Link link;
};

// nvlink-h100 (450 GB/s, 5 µs), ib-400g (50 GB/s, 10 µs), wan-100g (12.5 GB/s, 10 µs).
std::span<const LinkPreset> link_presets();
const LinkPreset* find_link_preset(std::string_view name);  // nullptr when unknown

// "5us" → 5e-6. Units s, ms, us (or µs), ns. Throws UserError quoting the text otherwise.
double parse_seconds(std::string_view text);
// "450GB/s" → 4.5e11. Bytes: B/s, KB/s, MB/s, GB/s, TB/s (powers of 10^3); bits: b/s, Kb/s, Mb/s, Gb/s, Tb/s.
double parse_bandwidth(std::string_view text);
// "alpha=5us,bw=450GB/s" (keys in any order, both required; `bandwidth` is accepted for `bw`), optionally
// ",gamma=0.07ns/B" (seconds per byte added) or ",gamma=15GB/s" (bytes added per second; γ = 1/rate).
Link parse_link_spec(std::string_view text);
// A preset name or a spec; the UserError lists the presets and the spec syntax.
Link parse_link(std::string_view text);

// "α = 5 µs, B = 450 GB/s" (and ", γ = 0.0667 ns/B" when γ > 0)
std::string describe(const Link& link);

}  // namespace dptrain::cost
