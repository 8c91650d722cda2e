// The safetensors file format (Hugging Face): an 8-byte little-endian header length, a JSON header mapping each
// tensor name to {dtype, shape, data_offsets} (plus an optional "__metadata__" of strings), then the raw data.
// Files are written to a temporary name and renamed, so a reader never sees half a file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace dptrain {

struct TensorToWrite {
  std::string name;
  std::string dtype;  // "BF16", "F32", ...
  std::vector<std::size_t> shape;
  const void* data = nullptr;
  std::size_t bytes = 0;
};

struct TensorRead {
  std::string dtype;
  std::vector<std::size_t> shape;
  std::vector<char> data;
};

struct SafetensorsFile {
  std::map<std::string, TensorRead> tensors;
  std::map<std::string, std::string> metadata;
};

// Returns the XXH64 of the bytes written (checksum.hpp): the checkpoint records it without reading the file back.
std::uint64_t write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                                const std::map<std::string, std::string>& metadata = {});

// Throws UserError naming the file and what is wrong (truncated, bad header, offsets out of range).
SafetensorsFile read_safetensors(const std::string& path);

// The same from bytes already read (`path` only names the file in messages): a checkpoint verifies a file's
// checksum and parses the bytes it hashed. Any input gives a SafetensorsFile or a UserError (fuzzed).
SafetensorsFile parse_safetensors(const std::string& path, std::string_view bytes);

// The whole file; UserError naming it when it cannot be opened.
std::string read_file_bytes(const std::string& path);

}  // namespace dptrain
