// The JSONL metrics file: one JSON object per line (each step, then {"event":"summary", ...}). Lines are
// flushed as written so a crashed run keeps its history; a resumed run appends.
#pragma once
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace dptrain {

class MetricsLog {
 public:
  MetricsLog() = default;  // disabled
  MetricsLog(const std::string& path, bool append);
  void write(const nlohmann::json& record);

 private:
  std::ofstream out_;
};

// Throws UserError when `path` cannot be opened for writing; leaves an existing file's contents as they are.
void require_log_writable(const std::string& path);

}  // namespace dptrain
