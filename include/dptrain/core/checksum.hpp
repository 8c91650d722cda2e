// File checksums of checkpoints: XXH64 (libxxhash) over a file's bytes, written as 16 lowercase hex digits.
// XXH64 and not a cryptographic hash: it guards against torn writes and flipped bits, not against tampering,
// and hashes at memory speed.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dptrain {

std::uint64_t xxh64(std::string_view bytes);

// "xxh64:0123456789abcdef": the form stored in meta.json (the algorithm named, so another can follow).
std::string checksum_text(std::uint64_t hash);

// The hash of a checksum_text() string; nullopt when the text is not of that form.
std::optional<std::uint64_t> parse_checksum_text(std::string_view text);

}  // namespace dptrain
