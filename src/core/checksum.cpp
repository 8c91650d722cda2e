// XXH64 checksums and their text form.
#include "dptrain/core/checksum.hpp"

#include <xxhash.h>

#include <fmt/format.h>

namespace dptrain {

namespace {
constexpr std::string_view kPrefix = "xxh64:";
}

std::uint64_t xxh64(std::string_view bytes) { return XXH64(bytes.data(), bytes.size(), 0); }

std::string checksum_text(std::uint64_t hash) { return fmt::format("{}{:016x}", kPrefix, hash); }

std::optional<std::uint64_t> parse_checksum_text(std::string_view text) {
  if (text.size() != kPrefix.size() + 16 || text.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  std::uint64_t hash = 0;
  for (char c : text.substr(kPrefix.size())) {
    int digit = 0;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return std::nullopt;
    }
    hash = hash << 4 | std::uint64_t(digit);
  }
  return hash;
}

}  // namespace dptrain
