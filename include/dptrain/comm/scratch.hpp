// Scratch: the receive scratch of a collective (incoming data waiting to be added in), allocated from the Memory
// the Collectives were given, so a device's collectives receive into that device's memory. Kept across calls:
// the largest buffer a collective needs is allocated once, not per call.
#pragma once
#include <cstddef>

#include "dptrain/core/memory.hpp"

namespace dptrain {

class Scratch {
 public:
  explicit Scratch(Memory& memory = host_memory()) : memory_(&memory) {}

  // At least `bytes` of uninitialised scratch in memory(), valid until the next get() with more bytes.
  void* get(std::size_t bytes);
  Memory& memory() const { return *memory_; }

 private:
  Memory* memory_;
  Buffer buffer_;
};

}  // namespace dptrain
