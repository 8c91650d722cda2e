// ModelConfig validation and parameter count, the ParameterLayout table (names, shapes, contiguous offsets, unit
// ranges) and GPT-2 initialisation (statistics, exact constants, determinism in the seed).
#include "dptrain/model/layout.hpp"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "dptrain/core/error.hpp"

namespace dptrain {
namespace {

ModelConfig make(int vocab, int seq, int layers, int width, int heads) {
  ModelConfig c;
  c.vocab = vocab, c.seq = seq, c.layers = layers, c.width = width, c.heads = heads;
  return c;
}

ModelConfig gpt2_124m() { return make(50257, 1024, 12, 768, 12); }

const std::vector<ModelConfig> kConfigs{make(11, 5, 2, 8, 2), make(256, 128, 4, 256, 4), make(2, 1, 1, 1, 1),
                                        make(1000, 7, 3, 12, 3), make(65, 64, 6, 384, 6), gpt2_124m()};

// V·H (token embedding, also the tied LM head) + Q·H (positions) + L·(12H² + 13H) + 2H (final LayerNorm), where a
// block has 4H (two LayerNorms) + 3H² + 3H (qkv) + H² + H (attention projection) + 4H² + 4H (MLP up)
// + 4H² + H (MLP down) = 12H² + 13H.
std::int64_t closed_form(const ModelConfig& c) {
  const std::int64_t V = c.vocab, Q = c.seq, L = c.layers, H = c.width;
  return V * H + Q * H + L * (12 * H * H + 13 * H) + 2 * H;
}

TEST(ParameterCount, EqualsSumOfLayoutEntriesAndClosedForm) {
  for (const ModelConfig& c : kConfigs) {
    const ParameterLayout layout(c);
    std::int64_t sum = 0;
    for (const auto& e : layout.entries()) sum += std::int64_t(e.numel);
    EXPECT_EQ(sum, std::int64_t(layout.total())) << describe(c);
    EXPECT_EQ(parameter_count(c), sum) << describe(c);
    EXPECT_EQ(parameter_count(c), closed_form(c)) << describe(c);
    const std::int64_t H = c.width;
    for (int l = 0; l < c.layers; ++l)
      EXPECT_EQ(std::int64_t(layout.block_range(l).size()), 12 * H * H + 13 * H) << describe(c) << " block " << l;
  }
}

TEST(ParameterCount, Gpt2SmallHasExactly124439808) {
  // 50257·768 + 1024·768 + 12·(12·768² + 13·768) + 2·768 = 38597376 + 786432 + 85054464 + 1536.
  EXPECT_EQ(parameter_count(gpt2_124m()), 124'439'808);
  EXPECT_EQ(ParameterLayout(gpt2_124m()).total(), 124'439'808u);
  // 6N + 12·L·H·Q = 746638848 + 113246208.
  EXPECT_EQ(training_flops_per_token(gpt2_124m()), 859'885'056.0);
  EXPECT_NE(describe(gpt2_124m()).find("124.44M"), std::string::npos) << describe(gpt2_124m());
}

TEST(LogitsRowLength, TheVocabularyRoundedUpToAMultipleOf64) {
  // GPT-2's 50,257 → 50,304 (llm.c's and nanoGPT's padded vocabulary); 64 BF16 elements are 128 bytes.
  for (const auto& [V, row] : {std::pair{1, 64}, {11, 64}, {63, 64}, {64, 64}, {65, 128}, {256, 256}, {50257, 50304}}) {
    ModelConfig c;
    c.vocab = V;
    EXPECT_EQ(c.logits_row_length(), row) << "V " << V;
  }
  EXPECT_EQ(gpt2_124m().logits_row_length(), 50304);
}

TEST(Layout, NamesShapesAndOrderFollowTheForwardPass) {
  const ModelConfig c = make(11, 5, 2, 8, 2);
  const ParameterLayout layout(c);
  const std::size_t V = 11, Q = 5, H = 8;
  struct Expected {
    std::string name;
    std::vector<std::size_t> shape;
    bool decay, residual;
  };
  std::vector<Expected> expected{{"wte.weight", {V, H}, true, false}, {"wpe.weight", {Q, H}, true, false}};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    for (Expected e : std::vector<Expected>{{"ln_1.weight", {H}, false, false},
                                            {"ln_1.bias", {H}, false, false},
                                            {"attn.c_attn.weight", {3 * H, H}, true, false},
                                            {"attn.c_attn.bias", {3 * H}, false, false},
                                            {"attn.c_proj.weight", {H, H}, true, true},
                                            {"attn.c_proj.bias", {H}, false, false},
                                            {"ln_2.weight", {H}, false, false},
                                            {"ln_2.bias", {H}, false, false},
                                            {"mlp.c_fc.weight", {4 * H, H}, true, false},
                                            {"mlp.c_fc.bias", {4 * H}, false, false},
                                            {"mlp.c_proj.weight", {H, 4 * H}, true, true},
                                            {"mlp.c_proj.bias", {H}, false, false}}) {
      e.name = p + e.name;
      expected.push_back(e);
    }
  }
  expected.push_back({"ln_f.weight", {H}, false, false});
  expected.push_back({"ln_f.bias", {H}, false, false});

  ASSERT_EQ(layout.entries().size(), expected.size());
  for (std::size_t k = 0; k < expected.size(); ++k) {
    const ParameterEntry& e = layout.entries()[k];
    EXPECT_EQ(e.name, expected[k].name);
    EXPECT_EQ(e.shape, expected[k].shape) << e.name;
    EXPECT_EQ(e.weight_decay, expected[k].decay) << e.name;  // 2-D tensors only
    EXPECT_EQ(e.residual_projection, expected[k].residual) << e.name;
    EXPECT_EQ(layout.find(e.name), &e);
  }
  EXPECT_EQ(layout.find("h.2.ln_1.weight"), nullptr);
  EXPECT_EQ(layout.find("lm_head.weight"), nullptr);  // tied: no separate head
}

TEST(Layout, OffsetsAreContiguousAndUnitRangesTileTheBuffer) {
  for (const ModelConfig& c : kConfigs) {
    const ParameterLayout layout(c);
    std::size_t at = 0;
    for (const auto& e : layout.entries()) {
      std::size_t numel = 1;
      for (std::size_t d : e.shape) numel *= d;
      EXPECT_EQ(e.numel, numel) << e.name;
      EXPECT_EQ(e.offset, at) << e.name;
      at += e.numel;
    }
    EXPECT_EQ(at, layout.total());

    // The accessors agree with the table.
    EXPECT_EQ(layout.wte(), layout.find("wte.weight")->offset);
    EXPECT_EQ(layout.wpe(), layout.find("wpe.weight")->offset);
    EXPECT_EQ(layout.lnf_w(), layout.find("ln_f.weight")->offset);
    EXPECT_EQ(layout.lnf_b(), layout.find("ln_f.bias")->offset);
    for (int l = 0; l < c.layers; ++l) {
      const BlockOffsets& b = layout.block(l);
      auto off = [&](const char* name) { return layout.find("h." + std::to_string(l) + "." + name)->offset; };
      EXPECT_EQ(b.ln1_w, off("ln_1.weight"));
      EXPECT_EQ(b.ln1_b, off("ln_1.bias"));
      EXPECT_EQ(b.qkv_w, off("attn.c_attn.weight"));
      EXPECT_EQ(b.qkv_b, off("attn.c_attn.bias"));
      EXPECT_EQ(b.attn_proj_w, off("attn.c_proj.weight"));
      EXPECT_EQ(b.attn_proj_b, off("attn.c_proj.bias"));
      EXPECT_EQ(b.ln2_w, off("ln_2.weight"));
      EXPECT_EQ(b.ln2_b, off("ln_2.bias"));
      EXPECT_EQ(b.fc_w, off("mlp.c_fc.weight"));
      EXPECT_EQ(b.fc_b, off("mlp.c_fc.bias"));
      EXPECT_EQ(b.fc_proj_w, off("mlp.c_proj.weight"));
      EXPECT_EQ(b.fc_proj_b, off("mlp.c_proj.bias"));
      EXPECT_EQ(b.begin, b.ln1_w);
      EXPECT_EQ(b.end, off("mlp.c_proj.bias") + std::size_t(c.width));
    }

    // Units: embeddings, blocks 0..L-1, final norm, in forward order, tiling [0, N) without gaps.
    std::vector<FlatRange> units{layout.embeddings()};
    for (int l = 0; l < c.layers; ++l) units.push_back(layout.block_range(l));
    units.push_back(layout.final_norm());
    std::size_t end = 0;
    for (const FlatRange& r : units) {
      EXPECT_EQ(r.begin, end);
      EXPECT_GT(r.size(), 0u);
      end = r.end;
    }
    EXPECT_EQ(end, layout.total());
    EXPECT_EQ(layout.embeddings().size(), std::size_t(c.vocab + c.seq) * c.width);
    EXPECT_EQ(layout.final_norm().size(), 2 * std::size_t(c.width));
  }
}

struct Moments {
  double mean = 0, std = 0, within_1sd = 0, beyond_3sd = 0, lag1_correlation = 0;
  std::size_t n = 0;
};

// Moments of the given tensors pooled, the tail fractions measured against `sigma` (the intended std).
Moments moments(const ParameterLayout& layout, const std::vector<float>& p, std::initializer_list<std::string> names,
                double sigma) {
  Moments m;
  double sum = 0, sq = 0, lag = 0;
  std::size_t within = 0, beyond = 0;
  for (const std::string& name : names) {
    const ParameterEntry* e = layout.find(name);
    for (std::size_t i = 0; i < e->numel; ++i) {
      const double x = p[e->offset + i];
      sum += x, sq += x * x;
      within += std::abs(x) < sigma;
      beyond += std::abs(x) > 3 * sigma;
      if (i > 0) lag += x * p[e->offset + i - 1];
    }
    m.n += e->numel;
  }
  m.mean = sum / m.n;
  m.std = std::sqrt(sq / m.n - m.mean * m.mean);
  m.within_1sd = double(within) / m.n;
  m.beyond_3sd = double(beyond) / m.n;
  m.lag1_correlation = lag / m.n / (m.std * m.std);
  return m;
}

// Checks a pooled sample of N(0, σ²) at 5 standard errors (the seed is fixed, so the test is deterministic; 5 SE
// would be exceeded by chance with probability 6e-7 per check for another seed): mean SE σ/√n, sample-std SE
// σ/√(2n), a fraction p's SE √(p(1−p)/n), a correlation's SE 1/√n. For n = 5e5 that is the std to within 0.5%,
// which separates 0.02 from 0.02/√(2L) by far and a normal from a uniform (P(|x| < σ) = 0.683 vs 0.577) too.
void expect_normal(const Moments& m, double sigma, const std::string& what) {
  const double n = double(m.n);
  EXPECT_NEAR(m.mean, 0.0, 5 * sigma / std::sqrt(n)) << what;
  EXPECT_NEAR(m.std, sigma, 5 * sigma / std::sqrt(2 * n)) << what;
  const double p1 = 0.682689492, p3 = 0.002699796;
  EXPECT_NEAR(m.within_1sd, p1, 5 * std::sqrt(p1 * (1 - p1) / n)) << what;
  EXPECT_NEAR(m.beyond_3sd, p3, 5 * std::sqrt(p3 * (1 - p3) / n)) << what;
  EXPECT_NEAR(m.lag1_correlation, 0.0, 5 / std::sqrt(n)) << what;
}

class Initialisation : public ::testing::Test {
 protected:
  // Large enough tensors for tight statistics: wte 524288, each c_attn 196608, each c_fc 262144 elements.
  ParameterLayout layout{make(2048, 256, 4, 256, 4)};
  std::vector<float> params = initialised(1234);

  std::vector<float> initialised(std::uint64_t seed) {
    std::vector<float> p(layout.total(), std::nanf(""));
    initialise_parameters(layout, seed, p.data());
    return p;
  }
};

TEST_F(Initialisation, MatricesAreNormalWithStd002) {
  expect_normal(moments(layout, params, {"wte.weight"}, 0.02), 0.02, "wte");
  expect_normal(moments(layout, params, {"wpe.weight"}, 0.02), 0.02, "wpe");
  for (int l = 0; l < 4; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    expect_normal(moments(layout, params, {p + "attn.c_attn.weight"}, 0.02), 0.02, p + "attn.c_attn.weight");
    expect_normal(moments(layout, params, {p + "mlp.c_fc.weight"}, 0.02), 0.02, p + "mlp.c_fc.weight");
  }
}

TEST_F(Initialisation, ResidualProjectionsAreScaledBySqrt2L) {
  const double sigma = 0.02 / std::sqrt(2.0 * 4);  // 0.00707
  for (int l = 0; l < 4; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    // 65536 and 262144 elements: the std to within 1.4% and 0.7%.
    expect_normal(moments(layout, params, {p + "attn.c_proj.weight"}, sigma), sigma, p + "attn.c_proj.weight");
    expect_normal(moments(layout, params, {p + "mlp.c_proj.weight"}, sigma), sigma, p + "mlp.c_proj.weight");
  }
}

TEST_F(Initialisation, BiasesZeroAndLayerNormWeightsOne) {
  for (const auto& e : layout.entries()) {
    if (e.shape.size() != 1) continue;
    const bool norm_weight = e.name.ends_with("ln_1.weight") || e.name.ends_with("ln_2.weight") ||
                             e.name == "ln_f.weight";
    for (std::size_t i = 0; i < e.numel; ++i)
      ASSERT_EQ(params[e.offset + i], norm_weight ? 1.0f : 0.0f) << e.name << "[" << i << "]";
  }
}

TEST_F(Initialisation, EveryElementIsWrittenAndFinite) {
  for (std::size_t i = 0; i < params.size(); ++i) ASSERT_TRUE(std::isfinite(params[i])) << i;
  // Odd-sized matrices too (Box–Muller produces pairs; the last element of an odd tensor must still be set).
  const ParameterLayout odd(make(7, 3, 1, 3, 1));
  std::vector<float> p(odd.total(), std::nanf(""));
  initialise_parameters(odd, 5, p.data());
  for (std::size_t i = 0; i < p.size(); ++i) EXPECT_TRUE(std::isfinite(p[i])) << i;
}

TEST_F(Initialisation, DeterministicInTheSeed) {
  const auto again = initialised(1234);
  EXPECT_EQ(std::memcmp(again.data(), params.data(), params.size() * sizeof(float)), 0);
  const auto other = initialised(1235);
  const ParameterEntry* wte = layout.find("wte.weight");
  std::size_t same = 0;
  for (std::size_t i = 0; i < wte->numel; ++i) same += other[wte->offset + i] == params[wte->offset + i];
  EXPECT_LT(same, wte->numel / 1000) << "a different seed must give different weights";
  // Different tensors get different draws (no tensor restarts the generator).
  const auto* a = layout.find("h.0.attn.c_attn.weight");
  const auto* b = layout.find("h.1.attn.c_attn.weight");
  EXPECT_NE(std::memcmp(&params[a->offset], &params[b->offset], 64 * sizeof(float)), 0);
}

TEST(InitialisationGolden, FirstValuesForSeed42) {
  // Pinned values (a regression check, taken from this implementation): the generator (splitmix64 + Box–Muller in double) is meant to give the same weights on every
  // platform, so a checkpoint-free run is reproducible anywhere. 4 ulp of slack for libm's last bit in log/cos/sin.
  const ParameterLayout layout(make(11, 5, 2, 8, 2));
  std::vector<float> p(layout.total());
  initialise_parameters(layout, 42, p.data());
  const std::vector<float> golden = {0.0176449772f, 0.027769465f, -0.00901699718f, 0.0134143289f, 0.00376705267f, -0.00410208059f};
  for (std::size_t i = 0; i < golden.size(); ++i) EXPECT_FLOAT_EQ(p[i], golden[i]) << i;
}

// Whether `token` occurs in `text` as a whole word or number ("0" must not match inside "1024").
bool contains_token(const std::string& text, const std::string& token) {
  auto part_of_token = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '.'; };
  for (std::size_t at = text.find(token); at != std::string::npos; at = text.find(token, at + 1)) {
    const bool starts = at == 0 || !part_of_token(text[at - 1]);
    const bool ends = at + token.size() == text.size() || !part_of_token(text[at + token.size()]);
    if (starts && ends) return true;
  }
  return false;
}

// validate() and the layout constructor reject bad configs with a UserError naming the field and the value.
void expect_user_error(const ModelConfig& c, std::initializer_list<const char*> must_contain) {
  for (int pass = 0; pass < 2; ++pass) {
    try {
      if (pass == 0) {
        validate(c);
      } else {
        ParameterLayout layout(c);
      }
      ADD_FAILURE() << "accepted " << (pass == 0 ? "by validate" : "by ParameterLayout");
    } catch (const UserError& e) {
      const std::string message = e.what();
      for (const char* s : must_contain)
        EXPECT_TRUE(contains_token(message, s)) << "message \"" << message << "\" does not name " << s;
    }
  }
}

TEST(Validate, RejectsBadConfigsNamingTheValue) {
  EXPECT_TRUE(contains_token("got 0", "0"));
  EXPECT_FALSE(contains_token("[1, 1024]", "0"));
  expect_user_error(make(256, 128, 0, 256, 4), {"--layers", "0"});
  expect_user_error(make(256, 128, -3, 256, 4), {"--layers", "-3"});
  expect_user_error(make(256, 128, 4, 10, 3), {"--heads", "--width", "10", "3"});
  expect_user_error(make(256, 128, 4, 768, 5), {"--heads", "--width", "768", "5"});
  expect_user_error(make(256, 128, 4, 256, 0), {"--heads", "0"});
  expect_user_error(make(1, 128, 4, 256, 4), {"--vocab", "1"});
  expect_user_error(make(256, 0, 4, 256, 4), {"--seq", "0"});
  expect_user_error(make(256, 128, 4, 0, 1), {"--width", "0"});
}

TEST(Validate, AcceptsGoodConfigs) {
  for (const ModelConfig& c : kConfigs) EXPECT_NO_THROW(validate(c)) << describe(c);
}

}  // namespace
}  // namespace dptrain
