// Data: text and token-shard loading, malformed shards, the split, and windows as a pure function of
// (seed, step, index) that do not depend on how many ranks share the batch.
#include "dptrain/train/data.hpp"

#include <gtest/gtest.h>

#include <fstream>

#include "dptrain/core/error.hpp"
#include "test_support.hpp"

namespace dptrain {
namespace {

using testing::TemporaryDirectory;

TEST(Data, TextFilesAreBytesInNameOrderSkippingIndexesAndLinks) {
  TemporaryDirectory dir("text");
  testing::write_text(dir / "b.txt", "BB");
  testing::write_text(dir / "a.txt", "A\xff");
  testing::write_text(dir / "a.txt.dat", "index");  // fortune's index files are skipped
  std::filesystem::create_symlink(dir / "a.txt", dir / "a.u8");  // a link to a file already read
  const Corpus c = load_corpus(dir.path.string());
  EXPECT_EQ(c.tokens, (std::vector<std::uint16_t>{'A', 0xff, 'B', 'B'}));
  EXPECT_EQ(c.max_token, 0xff);
}

TEST(Data, TokenShardRoundTrip) {
  TemporaryDirectory dir("shard");
  std::vector<std::uint16_t> tokens = {0, 1, 50256, 65535, 7};
  write_token_shard(dir / "s.bin", tokens);
  EXPECT_EQ(std::filesystem::file_size(dir / "s.bin"), 1024u + 2 * tokens.size());
  EXPECT_EQ(read_token_shard(dir / "s.bin"), tokens);
  const Corpus c = load_corpus(dir / "s.bin");
  EXPECT_EQ(c.tokens, tokens);
  EXPECT_EQ(c.max_token, 65535);
}

void expect_user_error(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing '" << fragment << "'";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Data, MalformedShardsAreRejected) {
  TemporaryDirectory dir("bad");
  write_token_shard(dir / "good.bin", {1, 2, 3, 4});
  std::string bytes;
  {
    std::ifstream in(dir / "good.bin", std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  testing::write_text(dir / "truncated.bin", bytes.substr(0, bytes.size() - 2));
  expect_user_error([&] { read_token_shard(dir / "truncated.bin"); }, "header says 4 tokens (8 bytes), body has 6");
  testing::write_text(dir / "short.bin", bytes.substr(0, 100));
  expect_user_error([&] { read_token_shard(dir / "short.bin"); }, "truncated: 100 bytes");
  std::string wrong_magic = bytes;
  wrong_magic[0] = 1;
  testing::write_text(dir / "magic.bin", wrong_magic);
  expect_user_error([&] { read_token_shard(dir / "magic.bin"); }, "expected 20240520");
  std::string wrong_version = bytes;
  wrong_version[4] = 7;
  testing::write_text(dir / "version.bin", wrong_version);
  expect_user_error([&] { read_token_shard(dir / "version.bin"); }, "has version 7, expected 1");
}

TEST(Data, MissingEmptyAndMixedSourcesAreRejected) {
  TemporaryDirectory dir("missing");
  expect_user_error([&] { load_corpus(dir / "nope"); }, "does not exist");
  testing::write_text(dir / "empty.txt", "");
  expect_user_error([&] { load_corpus(dir / "empty.txt"); }, "is empty");
  TemporaryDirectory mixed("mixed");
  write_token_shard(mixed / "s.bin", {1, 2});
  testing::write_text(mixed / "t.txt", "text");
  expect_user_error([&] { load_corpus(mixed.path.string()); }, "mixes 1 token shards and 1 text files");
}

TEST(Data, SplitAndWindowLengthChecks) {
  Corpus c;
  c.tokens.assign(100, 3);
  c.max_token = 3;
  Dataset d(c, 0.1, 8, 256);
  EXPECT_EQ(d.train_tokens(), 90u);
  EXPECT_EQ(d.val_tokens(), 10u);
  expect_user_error([&] { Dataset(c, 0.1, 10, 256); }, "longer than the validation split (10 tokens)");
  expect_user_error([&] { Dataset(c, 0.1, 4, 3); }, "token id 3 but the vocabulary has only 3");
}

TEST(Data, WindowsArePureFunctionsOfSeedStepIndex) {
  Corpus c;
  for (int i = 0; i < 5000; ++i) c.tokens.push_back(std::uint16_t(i % 251));
  c.max_token = 250;
  const Dataset d(c, 0.1, 16, 256);
  const std::size_t B = 12, W = 17;
  // The batch as one rank sees it.
  std::vector<std::int32_t> single(B * W);
  for (std::size_t i = 0; i < B; ++i) d.train_window(42, 7, i, single.data() + i * W);
  for (std::size_t ranks : {1u, 2u, 3u, 4u, 6u, 12u}) {
    std::vector<std::int32_t> assembled;
    for (std::size_t r = 0; r < ranks; ++r) {
      const WindowRange mine = rank_windows(B, ranks, r);
      EXPECT_EQ(mine.end - mine.begin, B / ranks);
      for (std::size_t i = mine.begin; i < mine.end; ++i) {
        std::vector<std::int32_t> w(W);
        d.train_window(42, 7, i, w.data());
        assembled.insert(assembled.end(), w.begin(), w.end());
      }
    }
    EXPECT_EQ(assembled, single) << ranks << " ranks";
  }
  // Windows are contiguous text of the training split, and differ across steps and seeds.
  for (std::size_t i = 0; i < B; ++i)
    for (std::size_t t = 1; t < W; ++t)
      EXPECT_EQ(single[i * W + t], (single[i * W + t - 1] + 1) % 251);
  std::vector<std::int32_t> other(W), again(W);
  d.train_window(42, 8, 0, other.data());
  d.train_window(43, 7, 0, again.data());
  EXPECT_NE(std::vector<std::int32_t>(single.begin(), single.begin() + W), other);
  EXPECT_NE(std::vector<std::int32_t>(single.begin(), single.begin() + W), again);
}

}  // namespace
}  // namespace dptrain
