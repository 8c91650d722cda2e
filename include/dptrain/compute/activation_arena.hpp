// ActivationArena: every activation and backward-scratch tensor of the model in one allocation, described by an
// offset table of named tensors (name, element size, count, offset). Tensors are added while the model is laid
// out, the arena is allocated once, and the table is what the memory summary reports.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "dptrain/core/memory.hpp"

namespace dptrain {

struct TensorSpec {
  std::string name;              // "h.3.qkv", "logits", ...
  std::size_t element_bytes = 0;
  std::size_t count = 0;         // elements
  std::size_t offset = 0;        // bytes from the arena's start, a multiple of Memory::kAlignment
  std::size_t bytes() const { return element_bytes * count; }
};

// Under AddressSanitizer (scripts/sanitize-kernels.sh) every tensor is an allocation of its own, so that a kernel's
// access past a tensor's end lands in a redzone instead of the next tensor; the table, its offsets and bytes() stay
// those of the one arena, which the memory summary reports.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kArenaTensorPerAllocation = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kArenaTensorPerAllocation = true;
#else
inline constexpr bool kArenaTensorPerAllocation = false;
#endif
#else
inline constexpr bool kArenaTensorPerAllocation = false;
#endif

class ActivationArena {
 public:
  using Id = std::size_t;

  // Adds a tensor (before allocate()).
  Id add(std::string name, std::size_t count, std::size_t element_bytes);
  // One allocation for every tensor added.
  void allocate(Memory& memory);

  void* data(Id id) const;
  template <typename T>
  T* as(Id id) const { return static_cast<T*>(data(id)); }

  const std::vector<TensorSpec>& table() const { return table_; }
  std::size_t bytes() const { return bytes_; }  // the whole arena, alignment included

 private:
  std::vector<TensorSpec> table_;
  std::size_t bytes_ = 0;
  Buffer buffer_;
  std::vector<Buffer> tensors_;  // with kArenaTensorPerAllocation: one per table entry, instead of buffer_
};

}  // namespace dptrain
