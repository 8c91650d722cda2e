// The collectives of docs/systems-model.md: the LLaMA-7B reference rows (numbers and printed strings), 64 GPUs on
// ib-400g computed here by hand from the formulas, and the edge cases.
#include <gtest/gtest.h>

#include "dptrain/core/error.hpp"
#include "dptrain/cost/collectives.hpp"
#include "dptrain/cost/format.hpp"
#include "dptrain/cost/hardware.hpp"

namespace dptrain::cost {
namespace {

constexpr double kLlamaParams = 6'738'149'376;
constexpr double kGradient = 2 * kLlamaParams;  // M = 13,476,298,752 bytes
constexpr Link kNvlink{5e-6, 450e9};
constexpr Link kInfiniband{10e-6, 50e9};

TEST(Collectives, ReferenceRowsNvlink8Gpus) {
  const CollectiveCost ring = collective_cost(Collective::ring_all_reduce, 8, kGradient, kNvlink);
  const CollectiveCost tree = collective_cost(Collective::tree_all_reduce, 8, kGradient, kNvlink);
  const CollectiveCost scatter = collective_cost(Collective::ring_reduce_scatter, 8, kGradient, kNvlink);
  const CollectiveCost gather = collective_cost(Collective::ring_all_gather, 8, kGradient, kNvlink);
  // Hand values: 14·5 µs + 1.75·M/450e9; 6·(5 µs + M/450e9); 7·5 µs + 0.875·M/450e9.
  EXPECT_NEAR(ring.seconds, 0.05247782848, 1e-12);
  EXPECT_NEAR(tree.seconds, 0.17971398336, 1e-12);
  EXPECT_NEAR(scatter.seconds, 0.02623891424, 1e-12);
  EXPECT_NEAR(gather.seconds, 0.02623891424, 1e-12);
  EXPECT_DOUBLE_EQ(ring.wire_bytes, 23'583'522'816.0);
  EXPECT_DOUBLE_EQ(tree.wire_bytes, 26'952'597'504.0);
  EXPECT_DOUBLE_EQ(scatter.wire_bytes, 11'791'761'408.0);
  EXPECT_DOUBLE_EQ(gather.wire_bytes, 11'791'761'408.0);

  EXPECT_EQ(format_bytes(kGradient), "13.48 GB");
  EXPECT_EQ(format_seconds(ring.seconds), "52.5 ms");
  EXPECT_EQ(format_bytes(ring.wire_bytes), "23.58 GB");
  EXPECT_EQ(format_seconds(tree.seconds), "179.7 ms");
  EXPECT_EQ(format_bytes(tree.wire_bytes), "26.95 GB");
  EXPECT_EQ(format_seconds(scatter.seconds), "26.2 ms");
  EXPECT_EQ(format_bytes(scatter.wire_bytes), "11.79 GB");
  EXPECT_EQ(format_seconds(gather.seconds), "26.2 ms");
  EXPECT_EQ(format_bytes(gather.wire_bytes), "11.79 GB");
}

TEST(Collectives, InfiniBand64GpusFromTheFormulas) {
  const double p = 64, alpha = 10e-6, bandwidth = 50e9, m = kGradient;
  const CollectiveCost ring = collective_cost(Collective::ring_all_reduce, 64, m, kInfiniband);
  EXPECT_NEAR(ring.seconds, 2 * (p - 1) * alpha + 2 * (p - 1) / p * m / bandwidth, 1e-15);
  EXPECT_DOUBLE_EQ(ring.wire_bytes, 2 * (p - 1) / p * m);
  EXPECT_EQ(format_seconds(ring.seconds), "531.9 ms");
  EXPECT_EQ(format_bytes(ring.wire_bytes), "26.53 GB");

  const CollectiveCost tree = collective_cost(Collective::tree_all_reduce, 64, m, kInfiniband);
  EXPECT_NEAR(tree.seconds, 2 * 6 * (alpha + m / bandwidth), 1e-14);  // ⌈log2 64⌉ = 6
  EXPECT_DOUBLE_EQ(tree.wire_bytes, 2 * m);
  EXPECT_EQ(format_seconds(tree.seconds), "3.23 s");

  for (Collective half : {Collective::ring_reduce_scatter, Collective::ring_all_gather}) {
    const CollectiveCost cost = collective_cost(half, 64, m, kInfiniband);
    EXPECT_NEAR(cost.seconds, (p - 1) * alpha + (p - 1) / p * m / bandwidth, 1e-15);
    EXPECT_DOUBLE_EQ(cost.wire_bytes, (p - 1) / p * m);
    EXPECT_EQ(format_seconds(cost.seconds), "265.9 ms");
    EXPECT_EQ(format_bytes(cost.wire_bytes), "13.27 GB");
  }
}

TEST(Collectives, PayloadIsWhatARankOriginates) {
  EXPECT_DOUBLE_EQ(collective_cost(Collective::ring_all_reduce, 8, kGradient, kNvlink).payload_bytes, kGradient);
  EXPECT_DOUBLE_EQ(collective_cost(Collective::ring_reduce_scatter, 8, kGradient, kNvlink).payload_bytes, kGradient);
  EXPECT_DOUBLE_EQ(collective_cost(Collective::ring_all_gather, 8, kGradient, kNvlink).payload_bytes, kGradient / 8);
  EXPECT_DOUBLE_EQ(collective_cost(Collective::tree_all_reduce, 8, kGradient, kNvlink).payload_bytes, kGradient);
}

TEST(Collectives, CompressedPieceAllGather) {
  // --compress 16: N/16 values, each a BF16 value plus a 4-byte index.
  const double piece = compressed_payload_bytes(kLlamaParams, 16);
  EXPECT_DOUBLE_EQ(piece, kLlamaParams / 16 * 6);
  EXPECT_DOUBLE_EQ(piece, 2'526'806'016.0);
  const CollectiveCost cost = collective_cost(Collective::piece_all_gather, 8, piece, kNvlink);
  EXPECT_DOUBLE_EQ(cost.payload_bytes, piece);
  EXPECT_DOUBLE_EQ(cost.wire_bytes, 7 * piece);
  EXPECT_NEAR(cost.seconds, 7 * 5e-6 + 7 * piece / 450e9, 1e-15);
  EXPECT_EQ(format_bytes(cost.wire_bytes), "17.69 GB");
  EXPECT_EQ(format_seconds(cost.seconds), "39.3 ms");
  EXPECT_DOUBLE_EQ(compressed_payload_bytes(17, 16), 2 * 6.0);  // a partial group still sends one value
  EXPECT_THROW(compressed_payload_bytes(100, 0), UserError);
}

TEST(Collectives, RingBytesStayBelowTwoMButPiecesGrowWithP) {
  const double piece = compressed_payload_bytes(kLlamaParams, 16);
  for (int p : {2, 8, 64, 1024, 65536}) {
    EXPECT_LT(collective_cost(Collective::ring_all_reduce, p, kGradient, kNvlink).wire_bytes, 2 * kGradient);
    EXPECT_DOUBLE_EQ(collective_cost(Collective::piece_all_gather, p, piece, kNvlink).wire_bytes, (p - 1) * piece);
  }
}

TEST(Collectives, OneRankSendsNothing) {
  for (Collective kind : {Collective::ring_all_reduce, Collective::ring_reduce_scatter, Collective::ring_all_gather,
                          Collective::tree_all_reduce, Collective::piece_all_gather}) {
    const CollectiveCost cost = collective_cost(kind, 1, kGradient, kNvlink);
    EXPECT_EQ(cost.seconds, 0) << collective_name(kind);
    EXPECT_EQ(cost.wire_bytes, 0) << collective_name(kind);
  }
}

TEST(Collectives, TermsAreTheFormulaCoefficients) {
  const AlphaBetaTerms ring = collective_terms(Collective::ring_all_reduce, 4, 1000);
  EXPECT_DOUBLE_EQ(ring.alpha_count, 6);
  EXPECT_DOUBLE_EQ(ring.bandwidth_bytes, 1500);
  const AlphaBetaTerms tree = collective_terms(Collective::tree_all_reduce, 5, 1000);  // ⌈log2 5⌉ = 3
  EXPECT_DOUBLE_EQ(tree.alpha_count, 6);
  EXPECT_DOUBLE_EQ(tree.bandwidth_bytes, 6000);
  const AlphaBetaTerms piece = collective_terms(Collective::piece_all_gather, 4, 100);
  EXPECT_DOUBLE_EQ(piece.alpha_count, 3);
  EXPECT_DOUBLE_EQ(piece.bandwidth_bytes, 300);
}

TEST(Collectives, CeilLog2) {
  EXPECT_EQ(ceil_log2(1), 0);
  EXPECT_EQ(ceil_log2(2), 1);
  EXPECT_EQ(ceil_log2(3), 2);
  EXPECT_EQ(ceil_log2(8), 3);
  EXPECT_EQ(ceil_log2(9), 4);
  EXPECT_EQ(ceil_log2(1024), 10);
}

TEST(Collectives, Names) {
  EXPECT_EQ(collective_name(Collective::ring_all_reduce), "ring all-reduce");
  EXPECT_EQ(collective_name(Collective::tree_all_reduce), "binary-tree all-reduce (not pipelined)");
  EXPECT_EQ(collective_name(Collective::ring_reduce_scatter), "reduce-scatter");
  EXPECT_EQ(collective_name(Collective::ring_all_gather), "all-gather");
}

TEST(Collectives, GammaChargesTheBytesEachCollectiveAdds) {
  // p = 4, M = 4e6: the ring adds 3 slices of 1e6 bytes in its reduce-scatter phase; the all-gather adds nothing;
  // the tree's root adds two children's 4e6 at each of its 2 levels.
  const Link with_gamma{.alpha_s = 0, .bandwidth_Bps = 1e9, .gamma_s_per_byte = 1e-10};
  const Link without{.alpha_s = 0, .bandwidth_Bps = 1e9};
  auto added = [&](Collective kind) {
    return collective_cost(kind, 4, 4e6, with_gamma).seconds - collective_cost(kind, 4, 4e6, without).seconds;
  };
  EXPECT_NEAR(added(Collective::ring_all_reduce), 3e6 * 1e-10, 1e-15);
  EXPECT_NEAR(added(Collective::ring_reduce_scatter), 3e6 * 1e-10, 1e-15);
  EXPECT_EQ(added(Collective::ring_all_gather), 0.0);
  EXPECT_NEAR(added(Collective::tree_all_reduce), 2 * 2 * 4e6 * 1e-10, 1e-15);
  EXPECT_NEAR(collective_terms(Collective::tree_all_reduce, 2, 1.0).reduced_bytes, 1.0, 0);  // one child
}

}  // namespace
}  // namespace dptrain::cost
