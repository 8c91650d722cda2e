// CommLog: the per-call record of collectives, read and cleared by the trainer every step.
#include "dptrain/comm/comm_log.hpp"

namespace dptrain {

void CommLog::add(const CommRecord& record) {
  std::lock_guard lock(mutex_);
  records_.push_back(record);
}

std::vector<CommRecord> CommLog::records() const {
  std::lock_guard lock(mutex_);
  return records_;
}

std::vector<CommRecord> CommLog::take() {
  std::lock_guard lock(mutex_);
  std::vector<CommRecord> taken;
  taken.swap(records_);
  return taken;
}

void CommLog::clear() {
  std::lock_guard lock(mutex_);
  records_.clear();
}

std::size_t CommLog::size() const {
  std::lock_guard lock(mutex_);
  return records_.size();
}

double CommLog::total_seconds() const {
  std::lock_guard lock(mutex_);
  double total = 0;
  for (const auto& r : records_) total += r.seconds;
  return total;
}

std::uint64_t CommLog::total_bytes() const {
  std::lock_guard lock(mutex_);
  std::uint64_t total = 0;
  for (const auto& r : records_) total += r.bytes;
  return total;
}

std::uint64_t CommLog::total_bytes_sent() const {
  std::lock_guard lock(mutex_);
  std::uint64_t total = 0;
  for (const auto& r : records_) total += r.bytes_sent;
  return total;
}

}  // namespace dptrain
