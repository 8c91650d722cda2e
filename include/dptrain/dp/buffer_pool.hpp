// Staging buffers for collectives (a unit's padded gradient before its reduce-scatter, a unit's weights being
// all-gathered): taken by the compute thread, given back by the comm executor when the collective is done, and
// reused across units and steps. What the pool has allocated is the "communication buffers" line of the memory
// summary.
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace dptrain {

class BufferPool {
 public:
  using Buffer = std::unique_ptr<std::vector<std::byte>>;

  // A buffer of at least `bytes` bytes (contents unspecified).
  Buffer acquire(std::size_t bytes);
  void release(Buffer buffer);
  std::size_t allocated_bytes() const;  // every buffer the pool owns or has lent

 private:
  mutable std::mutex mutex_;
  std::vector<Buffer> free_;
  std::size_t allocated_ = 0;
};

}  // namespace dptrain
