// Wall-clock timing on the steady clock.
#pragma once
#include <chrono>

namespace dptrain {

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class Stopwatch {
 public:
  Stopwatch() : start_(now_seconds()) {}
  double seconds() const { return now_seconds() - start_; }
  double milliseconds() const { return 1e3 * seconds(); }
  void restart() { start_ = now_seconds(); }

 private:
  double start_;
};

}  // namespace dptrain
