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
  // Appends one line. Returns the error, once, when the file could not take it (a full disk): "--log: cannot
  // write 'run.jsonl': No space left on device"; from then on nothing more is written. Empty otherwise.
  std::string write(const nlohmann::json& record);
  bool failed() const { return failed_; }

 private:
  std::ofstream out_;
  std::string path_;
  bool failed_ = false;
};

// Throws UserError when `path` cannot be opened for writing; leaves an existing file's contents as they are.
void require_log_writable(const std::string& path);

}  // namespace dptrain
