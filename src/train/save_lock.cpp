// The --save directory's lock: flock(LOCK_EX | LOCK_NB) on DIR/.dptrain.lock, held open until the process ends.
#include "dptrain/train/save_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "dptrain/core/error.hpp"

namespace dptrain {

SaveLock::~SaveLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

void SaveLock::acquire(const std::string& dir, bool create) {
  if (held()) return;
  const std::string path = (std::filesystem::path(dir) / ".dptrain.lock").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0644);
  if (fd < 0 && !create && errno == ENOENT) return;
  require(fd >= 0, "--save: cannot open the lock '{}': {}", path, std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(fd);
    require(error != EWOULDBLOCK,
            "--save: '{}' is in use by another run (it holds '{}'); wait for that run to end, or give another --save "
            "directory",
            dir, path);
    fail("--save: cannot lock '{}': {}", path, std::strerror(error));
  }
  fd_ = fd;
}

}  // namespace dptrain
