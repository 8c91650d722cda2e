#include "dptrain/train/overlap_choice.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "dptrain/core/error.hpp"

namespace dptrain {

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::vector<double> milliseconds(const std::vector<double>& seconds) {
  std::vector<double> ms;
  for (double s : seconds) ms.push_back(1e3 * s);
  return ms;
}

// Trial step k = 1 … 2·kTrialPairs: odd k with overlap, even k without.
bool in_trial(int index) { return index >= 1 && index <= 2 * OverlapChoice::kTrialPairs; }

}  // namespace

OverlapChoice::OverlapChoice(std::string_view mode) : mode_(mode) {
  DP_ASSERT(mode == "on" || mode == "off" || mode == "auto");  // checked with the other options
  overlap_ = mode != "off";
}

bool OverlapChoice::overlap_for_step(int index) const {
  if (mode_ != "auto" || decided_ || !in_trial(index)) return overlap_;
  return index % 2 == 1;
}

std::optional<std::string> OverlapChoice::record(int index, double seconds) {
  if (mode_ != "auto" || decided_ || !in_trial(index)) return std::nullopt;
  (index % 2 == 1 ? on_s_ : off_s_).push_back(seconds);
  if (index < 2 * kTrialPairs) return std::nullopt;
  decided_ = true;
  const double on = median(on_s_), off = median(off_s_);
  overlap_ = on <= off;
  return fmt::format(
      "dptrain | overlap auto: {} from here (median step {:.1f} ms with overlap, {:.1f} ms without, "
      "over {} steps each)",
      overlap_ ? "on" : "off", 1e3 * on, 1e3 * off, kTrialPairs);
}

nlohmann::json OverlapChoice::summary() const {
  nlohmann::json json = {{"mode", mode_}, {"overlap", overlap_}};
  if (mode_ == "auto") {
    json["decided"] = decided_;
    json["trial_on_ms"] = milliseconds(on_s_);
    json["trial_off_ms"] = milliseconds(off_s_);
  }
  return json;
}

}  // namespace dptrain
