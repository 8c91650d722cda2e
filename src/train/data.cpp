// Loading text and llm.c token shards, the train/validation split and the per-(seed, step, window) sampler.
#include "dptrain/train/data.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>

#include "dptrain/core/available_memory.hpp"
#include "dptrain/core/error.hpp"
#include "dptrain/core/hash.hpp"

namespace dptrain {
namespace fs = std::filesystem;

namespace {

std::string read_file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  require(bool(in), "cannot open data file '{}'", path.string());
  // The size is known first (only regular files are read): a corpus larger than memory is refused by its size
  // rather than by the allocator.
  std::error_code ec;
  const std::uintmax_t size = fs::file_size(path, ec);
  require(ec || double(size) * 3 <= available_memory_bytes(),
          "data file '{}' is {} bytes; reading it needs about 3 times that and only {} bytes are available",
          path.string(), size, std::uint64_t(available_memory_bytes()));
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

// A file is text unless it holds a NUL byte: UTF-8 and ASCII text never do, binary formats (a token shard's
// 16-bit ids below 256 among them) nearly always do.
bool looks_like_text(const std::string& bytes) { return bytes.find('\0') == std::string::npos; }

// Files under a directory, following links to directories; a link that leads back to a directory already on the
// way (a loop) is refused instead of being followed until the path is too long.
void collect_files(const fs::path& directory, std::set<fs::path>& ancestors, std::vector<fs::path>& out) {
  for (const fs::directory_entry& entry : fs::directory_iterator(directory)) {
    if (entry.is_directory()) {
      const fs::path target = fs::canonical(entry.path());
      require(!ancestors.contains(target),
              "data directory: '{}' is a symbolic link loop (it leads back to '{}'); remove the link or point "
              "--data elsewhere",
              entry.path().string(), target.string());
      ancestors.insert(target);
      collect_files(entry.path(), ancestors, out);
      ancestors.erase(target);
    } else if (entry.is_regular_file()) {
      out.push_back(entry.path());
    }
  }
}

std::vector<fs::path> source_files(const fs::path& root) {
  std::error_code ec;
  const auto status = fs::status(root, ec);
  require(!ec && fs::exists(status), "data path '{}' does not exist{}", root.string(),
          ec && ec != std::errc::no_such_file_or_directory ? fmt::format(" or cannot be read ({})", ec.message())
                                                          : std::string());
  // A device or pipe (/dev/zero, /dev/stdin) may never end: only files of a known size are read.
  require(fs::is_directory(status) || fs::is_regular_file(status),
          "data path '{}' is neither a regular file nor a directory; expected a text file, an llm.c token shard or "
          "a directory of them",
          root.string());
  if (!fs::is_directory(status)) return {root};
  std::vector<fs::path> files;
  std::set<fs::path> seen;  // canonical targets: fortune's *.u8 are links to the plain files
  std::vector<fs::path> all;
  try {
    std::set<fs::path> ancestors = {fs::canonical(root)};
    collect_files(root, ancestors, all);
  } catch (const fs::filesystem_error& e) {  // a link to itself, an unreadable folder, ...
    fail("data directory '{}': cannot read '{}': {}", root.string(), e.path1().string(), e.code().message());
  }
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
    // A file without the shard magic is text only if it looks like text and is not named as a shard: a shard
    // with a damaged header must not be trained on as bytes.
    const bool shard_name = file.extension() == ".bin";
    if (!starts_with_shard_magic(bytes) && (shard_name || !looks_like_text(bytes))) {
      std::int32_t magic = 0;
      std::memcpy(&magic, bytes.data(), std::min(bytes.size(), sizeof magic));
      fail("data file '{}' is {}: it starts with {} where an llm.c token shard has magic {}; expected a shard or "
           "text",
           file.string(), shard_name ? "named as a token shard but has no shard header" : "binary but not a token shard",
           magic, kShardMagic);
    }
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
  // index · last_start may pass 64 bits (2^31 windows over a split of 10^10 tokens): the product in 128.
  const std::uint64_t start = count > 1 ? std::uint64_t((unsigned __int128)index * last_start / (count - 1)) : 0;
  std::copy_n(corpus_.tokens.data() + split_ + start, window, out);
}

}  // namespace dptrain
