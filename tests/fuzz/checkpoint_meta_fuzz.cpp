// libFuzzer harness: parse_checkpoint_meta() on arbitrary text must return the metadata or throw UserError
// (`checkpoint '<dir>': meta.json: ...`); any other exception or a crash is a finding. Built by
// scripts/fuzz-checkpoint.sh.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "dptrain/core/error.hpp"
#include "dptrain/train/checkpoint_meta.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    dptrain::parse_checkpoint_meta("fuzz/step-000001", std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const dptrain::UserError&) {
  }
  return 0;
}
