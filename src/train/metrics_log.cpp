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

namespace {

// The line for a log file that did not open, with the system's reason (errno of the failed open).
[[noreturn]] void cannot_open(const std::string& path, int error) {
  fail("--log: cannot write '{}': {}", path, error != 0 ? std::strerror(error) : "open failed");
}

}  // namespace

MetricsLog::MetricsLog(const std::string& path, bool append) : path_(path) {
  errno = 0;
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  if (!out_.is_open()) cannot_open(path, errno);
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
  // A missing file is created and removed again, so that a set-up that fails later leaves nothing behind (the run
  // creates the log when its steps start). O_EXCL creates only where nothing is, not even a link.
  const int created = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0666);
  if (created >= 0) {
    ::close(created);
    ::unlink(path.c_str());
    return;
  }
  if (errno != EEXIST) cannot_open(path, errno);
  // Something is there (or a link to where the log would go): appending changes no byte of an existing file.
  errno = 0;
  std::ofstream probe(path, std::ios::app);
  if (!probe.is_open()) cannot_open(path, errno);
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
