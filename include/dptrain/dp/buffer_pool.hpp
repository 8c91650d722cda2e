// Staging buffers for collectives (a unit's padded gradient before its reduce-scatter, a unit's weights being
// all-gathered), in the compute device's memory: taken by the compute thread, given back by the comm executor when
// the collective is done (or by the compute thread after using a gathered unit), and reused across units and
// steps. What the pool has allocated is the "communication buffers" line of the memory summary.
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "dptrain/core/memory.hpp"

namespace dptrain {

class BufferPool {
 public:
  using Buffer = std::unique_ptr<dptrain::Buffer>;  // null when not held

  explicit BufferPool(Memory& memory) : memory_(memory) {}

  // A buffer of at least `bytes` bytes (contents unspecified).
  Buffer acquire(std::size_t bytes);
  void release(Buffer buffer);
  std::size_t allocated_bytes() const;  // every buffer the pool owns or has lent

 private:
  Memory& memory_;
  mutable std::mutex mutex_;
  std::vector<Buffer> free_;
  std::size_t allocated_ = 0;
};

}  // namespace dptrain
