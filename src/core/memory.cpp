// Host memory: aligned operator new, plain memcpy/memset.
#include "dptrain/core/memory.hpp"

#include <cstring>
#include <new>

namespace dptrain {
namespace {

class HostMemory final : public Memory {
 public:
  void* allocate(std::size_t bytes) override { return ::operator new(bytes, std::align_val_t{kAlignment}); }
  void release(void* data) noexcept override { ::operator delete(data, std::align_val_t{kAlignment}); }
  void copy(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void zero(void* dst, std::size_t bytes) override { std::memset(dst, 0, bytes); }
  void upload(void* dst, const void* host_src, std::size_t bytes) override { std::memcpy(dst, host_src, bytes); }
  void download(void* host_dst, const void* src, std::size_t bytes) override { std::memcpy(host_dst, src, bytes); }
  bool host_accessible() const override { return true; }
};

}  // namespace

Memory& host_memory() {
  static HostMemory memory;
  return memory;
}

}  // namespace dptrain
