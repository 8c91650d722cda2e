// Loading text and llm.c token shards, the train/validation split and the per-(seed, step, window) sampler.
#include "dptrain/train/data.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>

#include "dptrain/core/error.hpp"
#include "dptrain/core/hash.hpp"

namespace dptrain {
namespace fs = std::filesystem;

namespace {

std::string read_file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  require(bool(in), "cannot open data file '{}'", path.string());
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return bytes;
}

bool starts_with_shard_magic(const std::string& bytes) {
  std::int32_t magic = 0;
  if (bytes.size() < sizeof magic) return false;
  std::memcpy(&magic, bytes.data(), sizeof magic);
  return magic == kShardMagic;
}

std::vector<std::uint16_t> parse_token_shard(const std::string& bytes, const std::string& name) {
  require(bytes.size() >= kShardHeaderBytes, "token shard '{}' is truncated: {} bytes, the header alone is {}",
          name, bytes.size(), kShardHeaderBytes);
  std::array<std::int32_t, 3> header{};
  std::memcpy(header.data(), bytes.data(), sizeof header);
  require(header[0] == kShardMagic, "token shard '{}' has magic {}, expected {}", name, header[0], kShardMagic);
  require(header[1] == kShardVersion, "token shard '{}' has version {}, expected {}", name, header[1],
          kShardVersion);
  require(header[2] > 0, "token shard '{}' declares {} tokens; it must hold at least one", name, header[2]);
  const std::size_t count = std::size_t(header[2]);
  const std::size_t body = bytes.size() - kShardHeaderBytes;
  require(body == 2 * count, "token shard '{}' is truncated or padded: header says {} tokens ({} bytes), body has {} bytes",
          name, count, 2 * count, body);
  std::vector<std::uint16_t> tokens(count);
  std::memcpy(tokens.data(), bytes.data() + kShardHeaderBytes, 2 * count);
  return tokens;
}

std::vector<fs::path> source_files(const fs::path& root) {
  std::error_code ec;
  const auto status = fs::status(root, ec);
  require(!ec && fs::exists(status), "data path '{}' does not exist", root.string());
  if (!fs::is_directory(status)) return {root};
  std::vector<fs::path> files;
  std::set<fs::path> seen;  // canonical targets: fortune's *.u8 are links to the plain files
  std::vector<fs::path> all;
  for (const auto& entry : fs::recursive_directory_iterator(root, fs::directory_options::follow_directory_symlink))
    if (entry.is_regular_file()) all.push_back(entry.path());
  std::sort(all.begin(), all.end());
  for (const auto& path : all) {
    if (path.extension() == ".dat" || path.filename().string().starts_with(".")) continue;
    if (!seen.insert(fs::canonical(path)).second) continue;
    files.push_back(path);
  }
  require(!files.empty(), "data directory '{}' holds no data files", root.string());
  return files;
}

}  // namespace

std::vector<std::uint16_t> read_token_shard(const std::string& path) {
  return parse_token_shard(read_file_bytes(path), path);
}

void write_token_shard(const std::string& path, const std::vector<std::uint16_t>& tokens) {
  std::array<std::int32_t, kShardHeaderBytes / 4> header{};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = std::int32_t(tokens.size());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  require(bool(out), "cannot write token shard '{}'", path);
  out.write(reinterpret_cast<const char*>(header.data()), kShardHeaderBytes);
  out.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(2 * tokens.size()));
  require(bool(out), "failed writing token shard '{}'", path);
}

Corpus load_corpus(const std::string& path) {
  Corpus corpus;
  std::size_t shards = 0, texts = 0;
  for (const auto& file : source_files(path)) {
    const std::string bytes = read_file_bytes(file);
    if (starts_with_shard_magic(bytes)) {
      const auto tokens = parse_token_shard(bytes, file.string());
      corpus.tokens.insert(corpus.tokens.end(), tokens.begin(), tokens.end());
      ++shards;
    } else {
      corpus.tokens.insert(corpus.tokens.end(), bytes.begin(), bytes.end());
      std::transform(corpus.tokens.end() - std::ptrdiff_t(bytes.size()), corpus.tokens.end(),
                     corpus.tokens.end() - std::ptrdiff_t(bytes.size()),
                     [](std::uint16_t b) { return std::uint16_t(b & 0xff); });
      ++texts;
    }
  }
  require(shards == 0 || texts == 0,
          "data path '{}' mixes {} token shards and {} text files; use one kind", path, shards, texts);
  require(!corpus.tokens.empty(), "data path '{}' is empty: no tokens to train on", path);
  corpus.max_token = *std::max_element(corpus.tokens.begin(), corpus.tokens.end());
  corpus.description = shards ? fmt::format("{} token shard(s), {} tokens", shards, corpus.tokens.size())
                              : fmt::format("{} text file(s), {} bytes", texts, corpus.tokens.size());
  return corpus;
}

Dataset::Dataset(Corpus corpus, double val_fraction, int seq, int vocab) : corpus_(std::move(corpus)), seq_(seq) {
  require(corpus_.max_token < vocab, "data holds token id {} but the vocabulary has only {} ids (set --vocab)",
          corpus_.max_token, vocab);
  const std::size_t n = corpus_.tokens.size();
  split_ = n - std::size_t(double(n) * val_fraction);
  const std::size_t window = std::size_t(seq) + 1;
  require(split_ >= window, "a window of {} tokens (--seq {} + 1) is longer than the training split ({} tokens)",
          window, seq, split_);
  require(n - split_ >= window,
          "a window of {} tokens (--seq {} + 1) is longer than the validation split ({} tokens)", window, seq,
          n - split_);
}

std::uint64_t Dataset::tokens_hash() const {
  return fnv1a(corpus_.tokens.data(), corpus_.tokens.size() * sizeof(std::uint16_t));
}

void Dataset::train_window(std::uint64_t seed, std::uint64_t step, std::uint64_t index, std::int32_t* out) const {
  const std::size_t window = std::size_t(seq_) + 1;
  const std::uint64_t starts = split_ - window + 1;
  const std::uint64_t start = splitmix64(splitmix64(splitmix64(seed) ^ step) ^ index) % starts;
  std::copy_n(corpus_.tokens.data() + start, window, out);
}

void Dataset::val_window(std::uint64_t index, std::uint64_t count, std::int32_t* out) const {
  const std::size_t window = std::size_t(seq_) + 1;
  const std::uint64_t last_start = val_tokens() - window;
  const std::uint64_t start = count > 1 ? index * last_start / (count - 1) : 0;
  std::copy_n(corpus_.tokens.data() + split_ + start, window, out);
}

}  // namespace dptrain
