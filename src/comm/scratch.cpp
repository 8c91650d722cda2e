// Scratch: grows in its Memory, never shrinks.
#include "dptrain/comm/scratch.hpp"

namespace dptrain {

void* Scratch::get(std::size_t bytes) {
  if (bytes > buffer_.bytes()) {
    buffer_.reset();  // release first: the old contents are never needed, and the peak stays at one buffer
    buffer_ = Buffer(*memory_, bytes);
  }
  return buffer_.data();
}

}  // namespace dptrain
