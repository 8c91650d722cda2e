// Memory: where a buffer lives (host memory, or a compute device's), and Buffer, an owned allocation in it.
// The compute Device implements Memory (trivially on the CPU); the comm module takes its scratch from the Memory it
// is given, so collectives work on the buffers of whatever device computes. Every pointer a Memory hands out is
// that memory's: read and write it only through the Memory (or the device's kernels) unless host_accessible().
//
// Ordering: copy and zero are ordered with the device's compute stream (they run after the work issued before
// them); upload and download are synchronous (they return when the bytes have arrived, after the work issued
// before them); release may be called once no issued work uses the buffer any more, and a device whose work runs
// asynchronously makes release wait for (or order itself after) that work.
#pragma once
#include <cstddef>
#include <utility>

namespace dptrain {

class Memory {
 public:
  static constexpr std::size_t kAlignment = 256;  // of every allocation (cuBLASLt and vector loads need ≥ 16)

  virtual ~Memory() = default;
  virtual void* allocate(std::size_t bytes) = 0;  // uninitialised; throws std::bad_alloc when it cannot
  virtual void release(void* data) noexcept = 0;
  // dst and src both in this memory (they may not overlap).
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void zero(void* dst, std::size_t bytes) = 0;
  // Between this memory and host memory.
  virtual void upload(void* dst, const void* host_src, std::size_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, std::size_t bytes) = 0;
  // Whether the host may dereference this memory's pointers (true for host memory).
  virtual bool host_accessible() const = 0;
};

// Plain host memory (aligned operator new); what the cpu Device is.
Memory& host_memory();

// One allocation in a Memory, freed on destruction. Empty when default-constructed or moved from.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Memory& memory, std::size_t bytes)
      : memory_(&memory), data_(bytes ? memory.allocate(bytes) : nullptr), bytes_(bytes) {}
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      reset();
      memory_ = std::exchange(other.memory_, nullptr);
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  void reset() {
    if (data_) memory_->release(data_);
    data_ = nullptr;
    bytes_ = 0;
  }

  void* data() const { return data_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  std::size_t bytes() const { return bytes_; }
  Memory* memory() const { return memory_; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  Memory* memory_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace dptrain
