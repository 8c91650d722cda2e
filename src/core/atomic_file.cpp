// Atomic file replacement: temporary file, fsync, rename, fsync of the folder.
#include "dptrain/core/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "dptrain/core/error.hpp"

namespace dptrain {

namespace {

std::string temporary_beside(const std::string& path) { return path + ".tmp." + std::to_string(::getpid()); }

// Why a file renamed over `path` would be wrong there: a directory (the rename fails), or a device, a pipe or a
// socket, which the rename would replace with a regular file (/dev/null among them, for root). Empty otherwise.
std::string not_replaceable(const std::string& path) {
  struct stat status {};
  if (::stat(path.c_str(), &status) != 0 || S_ISREG(status.st_mode)) return "";
  if (S_ISDIR(status.st_mode)) return "it is a directory";
  return "it exists and is not a regular file (a device, a pipe or a socket, which the file written beside it and "
         "renamed over it would replace)";
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& bytes) {
  if (const std::string why = not_replaceable(path); !why.empty()) fail("cannot replace '{}': {}", path, why);
  const std::string temporary = temporary_beside(path);
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  require(fd >= 0, "cannot create '{}': {}", temporary, std::strerror(errno));
  std::size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n <= 0) {
      const int error = errno;
      ::close(fd);
      ::unlink(temporary.c_str());
      fail("cannot write '{}': {}", temporary, std::strerror(error));
    }
    written += std::size_t(n);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced || std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    fail("cannot replace '{}': {}", path, std::strerror(error));
  }
  const std::size_t slash = path.find_last_of('/');
  sync_directory(slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash));
}

void sync_directory(const std::string& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY);
  require(fd >= 0, "cannot open folder '{}' to flush it: {}", directory, std::strerror(errno));
  const bool synced = ::fsync(fd) == 0;
  const int error = errno;
  ::close(fd);
  require(synced, "cannot flush folder '{}': {}", directory, std::strerror(error));
}

std::string atomic_write_problem(const std::string& path) {
  if (const std::string why = not_replaceable(path); !why.empty()) return why;
  const std::string temporary = temporary_beside(path);
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return std::strerror(errno);
  ::close(fd);
  ::unlink(temporary.c_str());
  return "";
}

}  // namespace dptrain
