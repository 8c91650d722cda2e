// CommLog: the per-call record of collectives, read and cleared by the trainer every step.
#include "dptrain/comm/comm_log.hpp"

namespace dptrain {

void CommLog::add(const CommRecord& record) {
  std::lock_guard lock(mutex_);
  records_.push_back(record);
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

}  // namespace dptrain
