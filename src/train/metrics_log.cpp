// JSONL writer, and the check that its file can be written made before anything is written to it.
#include "dptrain/train/metrics_log.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "dptrain/core/error.hpp"

namespace dptrain {

MetricsLog::MetricsLog(const std::string& path, bool append)
    : out_(path, append ? std::ios::app : std::ios::trunc), path_(path) {
  require(out_.is_open(), "--log: cannot open '{}' for writing", path);
}

void require_log_writable(const std::string& path) {
  // A named pipe: opening it to write waits for a reader, and would hold this rank (and every other, waiting for
  // it) without a word. Asked without waiting, an open with no reader fails at once (ENXIO).
  struct stat status {};
  if (::stat(path.c_str(), &status) == 0 && S_ISFIFO(status.st_mode)) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
    require(fd >= 0, "--log: '{}' is a named pipe {}", path,
            errno == ENXIO ? "that no process reads (start its reader first)" : std::strerror(errno));
    ::close(fd);
    return;
  }
  // Appending creates a missing file but changes no byte of an existing one.
  std::ofstream probe(path, std::ios::app);
  require(probe.is_open(), "--log: cannot open '{}' for writing", path);
}

std::string MetricsLog::write(const nlohmann::json& record) {
  if (!out_.is_open() || failed_) return {};
  errno = 0;
  out_ << record.dump() << '\n';
  out_.flush();
  if (out_.good()) return {};
  failed_ = true;
  return fmt::format("--log: cannot write '{}': {}", path_, errno != 0 ? std::strerror(errno) : "write failed");
}

}  // namespace dptrain
