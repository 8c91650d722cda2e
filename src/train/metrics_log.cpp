// JSONL writer, and the check that its file can be written made before anything is written to it.
#include "dptrain/train/metrics_log.hpp"

#include "dptrain/core/error.hpp"

namespace dptrain {

MetricsLog::MetricsLog(const std::string& path, bool append)
    : out_(path, append ? std::ios::app : std::ios::trunc) {
  require(out_.is_open(), "--log: cannot open '{}' for writing", path);
}

void require_log_writable(const std::string& path) {
  // Appending creates a missing file but changes no byte of an existing one.
  std::ofstream probe(path, std::ios::app);
  require(probe.is_open(), "--log: cannot open '{}' for writing", path);
}

void MetricsLog::write(const nlohmann::json& record) {
  if (!out_.is_open()) return;
  out_ << record.dump() << '\n';
  out_.flush();
}

}  // namespace dptrain
