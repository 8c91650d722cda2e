// The activation arena: tensors placed one after another at aligned offsets, one allocation.
#include "dptrain/compute/activation_arena.hpp"

#include "dptrain/core/error.hpp"

namespace dptrain {

ActivationArena::Id ActivationArena::add(std::string name, std::size_t count, std::size_t element_bytes) {
  DP_ASSERT(!buffer_ && tensors_.empty());
  const std::size_t offset = (bytes_ + Memory::kAlignment - 1) / Memory::kAlignment * Memory::kAlignment;
  table_.push_back({std::move(name), element_bytes, count, offset});
  bytes_ = offset + count * element_bytes;
  return table_.size() - 1;
}

void ActivationArena::allocate(Memory& memory) {
  DP_ASSERT(!buffer_ && tensors_.empty());
  if (!kArenaTensorPerAllocation) {
    buffer_ = Buffer(memory, bytes_);
    return;
  }
  for (const TensorSpec& t : table_) tensors_.emplace_back(memory, t.bytes());
}

void* ActivationArena::data(Id id) const {
  DP_ASSERT(id < table_.size());
  if (kArenaTensorPerAllocation) return tensors_.at(id).data();
  DP_ASSERT(buffer_);
  return static_cast<std::byte*>(buffer_.data()) + table_[id].offset;
}

}  // namespace dptrain
