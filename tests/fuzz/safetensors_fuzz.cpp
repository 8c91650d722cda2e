// libFuzzer harness: parse_safetensors() on arbitrary bytes must return a file or throw UserError; nothing else
// (no crash, no other exception, no out-of-bounds read under AddressSanitizer). Built by scripts/fuzz-checkpoint.sh.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "dptrain/core/error.hpp"
#include "dptrain/train/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    dptrain::parse_safetensors("fuzz.safetensors", std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const dptrain::UserError&) {
  }
  return 0;
}
