// Training data: a token stream loaded from text (bytes are tokens) or llm.c token shards, split into a train
// and a validation part, and the batch sampler. Window i of step s is a pure function of (seed, s, i): the same
// whatever the number of ranks that share the batch, and the same after a resume.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dptrain {

inline constexpr std::int32_t kShardMagic = 20240520;
inline constexpr std::int32_t kShardVersion = 1;
inline constexpr std::size_t kShardHeaderBytes = 1024;  // 256 int32: magic, version, token count, unused

struct Corpus {
  std::vector<std::uint16_t> tokens;
  std::string description;  // e.g. "43 text files, 2576674 bytes"
  int max_token = 0;
};

// A path is a file or a directory. Files starting with the shard magic are token shards (uint16 tokens), any
// other file is text (one token per byte). A directory contributes its regular files in name order, recursing,
// skipping fortune's *.dat indexes and links to files already read. Throws UserError on a missing or empty
// source, a malformed shard, or a mix of shards and text.
Corpus load_corpus(const std::string& path);

// Reads one llm.c token shard (exposed for tests).
std::vector<std::uint16_t> read_token_shard(const std::string& path);

// Writes a token shard (for tests and for users converting corpora).
void write_token_shard(const std::string& path, const std::vector<std::uint16_t>& tokens);

// The global windows [begin, end) of a batch of `batch` windows that rank `rank` of `ranks` computes.
struct WindowRange {
  std::size_t begin = 0, end = 0;
};
inline WindowRange rank_windows(std::size_t batch, std::size_t ranks, std::size_t rank) {
  return {rank * batch / ranks, (rank + 1) * batch / ranks};
}

class Dataset {
 public:
  // Splits the corpus: the first (1 − val_fraction) of the tokens train, the rest validate. Throws UserError
  // when either part is shorter than a window of seq + 1 tokens or a token is outside the vocabulary.
  Dataset(Corpus corpus, double val_fraction, int seq, int vocab);

  std::size_t train_tokens() const { return split_; }
  std::size_t val_tokens() const { return corpus_.tokens.size() - split_; }
  const std::string& description() const { return corpus_.description; }
  // FNV-1a of all tokens (both splits): ranks compare it to be sure they train on the same data.
  std::uint64_t tokens_hash() const;

  // Global window `index` of training step `step` ([seq+1] tokens into out).
  void train_window(std::uint64_t seed, std::uint64_t step, std::uint64_t index, std::int32_t* out) const;
  // Validation window `index` of `count`, evenly spaced over the validation split.
  void val_window(std::uint64_t index, std::uint64_t count, std::int32_t* out) const;

 private:
  Corpus corpus_;
  std::size_t split_ = 0;
  int seq_ = 0;
};

}  // namespace dptrain
