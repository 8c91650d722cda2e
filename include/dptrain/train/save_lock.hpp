// One run per checkpoint directory: rank 0 of a run with --save holds an exclusive lock (flock) on
// DIR/.dptrain.lock for as long as it lives, so a second run started on the same directory is refused instead of
// removing the first one's temporaries and folders under it. The kernel releases the lock when the process ends,
// however it ends, so a killed run never leaves the directory locked.
#pragma once
#include <string>

namespace dptrain {

class SaveLock {
 public:
  SaveLock() = default;
  ~SaveLock();
  SaveLock(const SaveLock&) = delete;
  SaveLock& operator=(const SaveLock&) = delete;

  // Takes the lock of the existing directory `dir` (once; later calls return at once), creating the lock file
  // unless `create` is false: then a directory without one is left as it is (the checks of --save create nothing
  // before the ranks agree on it; Trainer::connect then makes the directory and the file, and takes the lock
  // before step 1). Throws UserError when another process holds it, or the lock file cannot be made.
  void acquire(const std::string& dir, bool create = true);
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace dptrain
