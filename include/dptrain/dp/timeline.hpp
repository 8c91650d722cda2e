// What a rank did when: compute phases on the compute thread and collectives on the comm executor, as events with
// start and end times since a common origin. The trainer turns them into a Chrome trace (--trace).
#pragma once
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace dptrain {

struct TimelineEvent {
  enum class Track { compute, communication };
  Track track = Track::compute;
  std::string name;          // "forward", "backward block 3", "all_reduce final norm", "optimizer", ...
  double start_s = 0, end_s = 0;  // since the origin
  int step = 0;              // optimizer step, 1-based
  int unit = -1;             // the unit the event belongs to (-1: none)
  std::uint64_t bytes = 0;   // a collective's payload
};

// Thread-safe: the comm executor adds its events while the compute thread adds its own.
class Timeline {
 public:
  // Times are measured always (the step's exposed communication needs them); events are kept only if recording.
  void record(bool on) { recording_ = on; }
  bool recording() const { return recording_; }
  // The origin at `steady_seconds` on the steady clock (now_seconds()'s reading): another rank's on the same host.
  void set_origin(double steady_seconds) {
    origin_ = std::chrono::steady_clock::time_point(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(steady_seconds)));
  }
  double now() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count(); }

  // Callers check recording() first when building an event costs something (formatted names).
  void add(TimelineEvent event) {
    if (!recording_) return;
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
  }
  std::vector<TimelineEvent> take() {
    std::lock_guard lock(mutex_);
    return std::exchange(events_, {});
  }

 private:
  bool recording_ = false;
  std::chrono::steady_clock::time_point origin_ = std::chrono::steady_clock::now();
  std::mutex mutex_;
  std::vector<TimelineEvent> events_;
};

}  // namespace dptrain
