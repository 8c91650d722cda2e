// The staging-buffer pool: best fit among the free buffers, a new one when none fits.
#include "dptrain/dp/buffer_pool.hpp"

namespace dptrain {

BufferPool::Buffer BufferPool::acquire(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it)
    if ((*it)->bytes() >= bytes && (best == free_.end() || (*it)->bytes() < (*best)->bytes())) best = it;
  if (best != free_.end()) {
    Buffer buffer = std::move(*best);
    free_.erase(best);
    return buffer;
  }
  allocated_ += bytes;
  return std::make_unique<dptrain::Buffer>(memory_, bytes);
}

void BufferPool::release(Buffer buffer) {
  std::lock_guard lock(mutex_);
  free_.push_back(std::move(buffer));
}

std::size_t BufferPool::allocated_bytes() const {
  std::lock_guard lock(mutex_);
  return allocated_;
}

}  // namespace dptrain
