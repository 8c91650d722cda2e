// Reading and writing safetensors files; atomic file replacement.
#include "dptrain/train/safetensors.hpp"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "dptrain/core/atomic_file.hpp"
#include "dptrain/core/checksum.hpp"
#include "dptrain/core/error.hpp"

namespace dptrain {
namespace {

std::size_t dtype_size(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "BF16" || dtype == "F16" || dtype == "U16") return 2;
  if (dtype == "F64" || dtype == "I64") return 8;
  if (dtype == "U8" || dtype == "I8") return 1;
  return 0;
}

// A list of non-negative integers; JSON floats are refused here because converting one out of range to
// std::size_t (what nlohmann's get<> would do) is undefined behaviour.
std::vector<std::size_t> sizes(const std::string& path, const std::string& tensor, const char* key,
                               const nlohmann::json& value) {
  std::vector<std::size_t> out;
  require(value.is_array(), "checkpoint file '{}' has a damaged header: tensor '{}': '{}' is not a list", path,
          tensor, key);
  for (const auto& v : value) {
    require(v.is_number_unsigned(),
            "checkpoint file '{}' has a damaged header: tensor '{}': '{}' holds {}, expected non-negative integers",
            path, tensor, key, v.dump());
    out.push_back(v.get<std::size_t>());
  }
  return out;
}

}  // namespace

std::uint64_t write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                                const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::size_t offset = 0;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes}}};
    offset += t.bytes;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  std::string bytes;
  bytes.reserve(8 + json.size() + offset);
  const std::uint64_t header_size = json.size();
  bytes.append(reinterpret_cast<const char*>(&header_size), 8);
  bytes.append(json);
  for (const auto& t : tensors) bytes.append(static_cast<const char*>(t.data), t.bytes);
  write_file_atomically(path, bytes);
  return xxh64(bytes);
}

std::string read_file_bytes(const std::string& path) {
  // A folder, a device (a link to /dev/zero reads forever), a FIFO (blocks): never a file a save wrote.
  require(!std::filesystem::exists(path) || std::filesystem::is_regular_file(path),
          "checkpoint file '{}' is not a regular file (expected the file a save wrote)", path);
  std::ifstream in(path, std::ios::binary);
  require(bool(in), "cannot open checkpoint file '{}'", path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

SafetensorsFile read_safetensors(const std::string& path) { return parse_safetensors(path, read_file_bytes(path)); }

SafetensorsFile parse_safetensors(const std::string& path, std::string_view bytes) {
  require(bytes.size() >= 8, "checkpoint file '{}' is truncated ({} bytes)", path, bytes.size());
  std::uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  require(header_size <= bytes.size() - 8, "checkpoint file '{}' is truncated: header of {} bytes, file of {}",
          path, header_size, bytes.size());
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.substr(8, header_size));
    require(header.is_object(), "checkpoint file '{}' has a damaged header: a JSON {}, expected an object", path,
            header.type_name());
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint file '{}' has a damaged header: {}", path, e.what());
  }
  const std::size_t data_begin = 8 + header_size, data_size = bytes.size() - data_begin;
  SafetensorsFile file;
  try {
    for (const auto& [name, value] : header.items()) {
      if (name == "__metadata__") {
        file.metadata = value.get<std::map<std::string, std::string>>();
        continue;
      }
      TensorRead t;
      t.dtype = value.at("dtype").get<std::string>();
      t.shape = sizes(path, name, "shape", value.at("shape"));
      const auto offsets = sizes(path, name, "data_offsets", value.at("data_offsets"));
      std::size_t numel = 1;
      for (auto d : t.shape) numel *= d;
      require(offsets.size() == 2 && offsets[0] <= offsets[1] && offsets[1] <= data_size &&
                  offsets[1] - offsets[0] == numel * dtype_size(t.dtype),
              "checkpoint file '{}' is damaged: tensor '{}' has inconsistent offsets or is truncated", path, name);
      t.data.assign(bytes.data() + data_begin + offsets[0], bytes.data() + data_begin + offsets[1]);
      file.tensors.emplace(name, std::move(t));
    }
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint file '{}' has a damaged header: {}", path, e.what());
  }
  return file;
}

}  // namespace dptrain
