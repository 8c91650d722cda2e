// --overlap auto: gradient overlap on or off, whichever runs this job's step faster, measured on its own steps.
//
// Both settings train bitwise the same model (the same collectives in the same order; only when they start
// differs), so the choice is about speed alone, and it goes both ways: across a slow link overlap hides the
// transfer behind backward, while on a machine whose cores are all computing (2 ranks × 1 thread on 2 cores) the
// comm thread's copies and additions take a core from backward and overlap can cost more than it hides
// (docs/cpu-speed.md). So after the first step (warm-up) kTrialPairs pairs of steps run with overlap on and off
// alternately, each timed as the slowest rank's step, and the run keeps the one with the lower median (on where
// equal). Every rank sees the same times, so every rank decides alike. A run shorter than the trial keeps overlap
// on after it.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dptrain {

class OverlapChoice {
 public:
  static constexpr int kTrialPairs = 3;

  explicit OverlapChoice(std::string_view mode);  // "on", "off" or "auto"

  // Whether the step `index` of this run (0 = the first step it runs, also after a resume) overlaps.
  bool overlap_for_step(int index) const;
  // The step's time, the slowest rank's. Returns the line that announces the choice at the step that completes
  // the trial (once), nothing otherwise.
  std::optional<std::string> record(int index, double seconds);

  const std::string& mode() const { return mode_; }
  // The setting outside the trial: the choice once made; on before it and where the run ended inside it.
  bool overlap() const { return overlap_; }
  // {"mode", "overlap" (what later steps use), and for auto the trial's step times in ms and "decided"}.
  nlohmann::json summary() const;

 private:
  std::string mode_;
  bool overlap_ = true;   // after the trial (auto) or throughout (on, off)
  bool decided_ = false;  // auto: the trial is complete
  std::vector<double> on_s_, off_s_;
};

}  // namespace dptrain
