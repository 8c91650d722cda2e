// Link presets, `--link` parsing and its errors.
#include <gtest/gtest.h>

#include "dptrain/core/error.hpp"
#include "dptrain/cost/link.hpp"

namespace dptrain::cost {
namespace {

TEST(Link, PresetsAreSystemsModelTable) {
  ASSERT_NE(find_link_preset("nvlink-h100"), nullptr);
  EXPECT_EQ(find_link_preset("nvlink-h100")->link, (Link{5e-6, 450e9}));
  EXPECT_EQ(find_link_preset("ib-400g")->link, (Link{10e-6, 50e9}));
  EXPECT_EQ(find_link_preset("wan-100g")->link, (Link{10e-6, 12.5e9}));
  EXPECT_EQ(find_link_preset("nvlink-h100")->where, "NVLink");
  EXPECT_EQ(find_link_preset("calibrated"), nullptr);
  EXPECT_EQ(link_presets().size(), 3u);
}

TEST(Link, MessageSecondsIsAlphaPlusBytesOverBandwidth) {
  EXPECT_DOUBLE_EQ((Link{5e-6, 450e9}).message_seconds(450e6), 5e-6 + 1e-3);
}

TEST(Link, ParsesTimeUnits) {
  EXPECT_DOUBLE_EQ(parse_seconds("2s"), 2.0);
  EXPECT_DOUBLE_EQ(parse_seconds("1.5ms"), 1.5e-3);
  EXPECT_DOUBLE_EQ(parse_seconds("5us"), 5e-6);
  EXPECT_DOUBLE_EQ(parse_seconds("5µs"), 5e-6);
  EXPECT_DOUBLE_EQ(parse_seconds("800ns"), 800e-9);
  EXPECT_DOUBLE_EQ(parse_seconds("5 us"), 5e-6);
  EXPECT_DOUBLE_EQ(parse_seconds("1e-3s"), 1e-3);
  EXPECT_DOUBLE_EQ(parse_seconds("0us"), 0.0);
}

TEST(Link, ParsesBandwidthUnitsInBytesAndBits) {
  EXPECT_DOUBLE_EQ(parse_bandwidth("450GB/s"), 450e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("12.5GB/s"), 12.5e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("3MB/s"), 3e6);
  EXPECT_DOUBLE_EQ(parse_bandwidth("7KB/s"), 7e3);
  EXPECT_DOUBLE_EQ(parse_bandwidth("100B/s"), 100.0);
  EXPECT_DOUBLE_EQ(parse_bandwidth("400Gb/s"), 50e9);  // bits: 400 Gb/s is the ib-400g preset
  EXPECT_DOUBLE_EQ(parse_bandwidth("100Gb/s"), 12.5e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("8Mb/s"), 1e6);
}

TEST(Link, ParsesSpecInAnyOrder) {
  EXPECT_EQ(parse_link_spec("alpha=5us,bw=450GB/s"), (Link{5e-6, 450e9}));
  EXPECT_EQ(parse_link_spec("bw=400Gb/s,alpha=10us"), (Link{10e-6, 50e9}));
  EXPECT_EQ(parse_link_spec("alpha=1ms,bandwidth=1GB/s"), (Link{1e-3, 1e9}));
  EXPECT_EQ(parse_link("ib-400g"), (Link{10e-6, 50e9}));
  EXPECT_EQ(parse_link("alpha=5us,bw=450GB/s"), (Link{5e-6, 450e9}));
}

TEST(Link, ParsesGammaAsTimePerByteOrAsARate) {
  EXPECT_EQ(parse_link_spec("alpha=5us,bw=450GB/s,gamma=2ns/B"), (Link{5e-6, 450e9, 2e-9}));
  EXPECT_EQ(parse_link_spec("gamma=10GB/s,alpha=5us,bw=450GB/s"), (Link{5e-6, 450e9, 1 / 10e9}));
  EXPECT_EQ(parse_link("ib-400g").gamma_s_per_byte, 0.0);  // presets add for free, as docs/systems-model.md
  EXPECT_EQ(describe(Link{5e-6, 450e9, 2e-9}), "α = 5 µs, B = 450 GB/s, γ = 2 ns/B");
}

// Every bad value is refused with a UserError that quotes what was wrong.
void expect_refused(const std::string& text, const std::string& quoted) {
  try {
    parse_link(text);
    ADD_FAILURE() << "accepted " << text;
  } catch (const UserError& error) {
    EXPECT_NE(std::string(error.what()).find(quoted), std::string::npos) << error.what();
  }
}

TEST(Link, RefusesBadSpecsNamingTheBadText) {
  expect_refused("alpha=5xs,bw=450GB/s", "'5xs'");
  expect_refused("alpha=5us,bw=450GiB/s", "'450GiB/s'");
  expect_refused("alpha=5us,bw=450", "'450'");
  expect_refused("alpha=us,bw=450GB/s", "'us'");
  expect_refused("alpha=5us", "needs both alpha and bw");
  expect_refused("bw=450GB/s", "needs both alpha and bw");
  expect_refused("alpha=5us,bw=450GB/s,gamma=1s", "'1s'");  // neither a time per byte nor a rate
  expect_refused("alpha=5us,bw=450GB/s,gamma=1ns/B,gamma=2ns/B", "'gamma'");
  expect_refused("alpha=5us,bw=450GB/s,delta=1s", "'delta'");
  expect_refused("alpha=5us,alpha=6us,bw=1GB/s", "'alpha'");
  expect_refused("alpha=5us;bw=450GB/s", "'5us;bw=450GB/s'");
  expect_refused("alpha=-5us,bw=450GB/s", "'-5us'");
  expect_refused("alpha=5us,bw=0GB/s", "'0GB/s'");
  expect_refused("alpha=5us,bw=infGB/s", "'infGB/s'");
  expect_refused("alpha=5us,5us", "'5us' is not key=value");
  expect_refused("alpha=5us,bw=450GB/s,", "bad link 'alpha=5us,bw=450GB/s,': nothing after its last comma");
  expect_refused("alpha=5us,bw=1e400GB/s", "bad bandwidth '1e400GB/s': the number is beyond a double's range");
  expect_refused("nvlink-a100", "unknown link 'nvlink-a100'");
  expect_refused("nvlink-a100", "nvlink-h100, ib-400g, wan-100g");
}

TEST(Link, DescribesInTheLargestUnitAtLeastOne) {
  EXPECT_EQ(describe(Link{5e-6, 450e9}), "α = 5 µs, B = 450 GB/s");
  EXPECT_EQ(describe(Link{10e-6, 12.5e9}), "α = 10 µs, B = 12.5 GB/s");
  EXPECT_EQ(describe(Link{2, 1e6}), "α = 2 s, B = 1 MB/s");
  EXPECT_EQ(describe(Link{1e-3, 25e6}), "α = 1 ms, B = 25 MB/s");
  EXPECT_EQ(describe(Link{7e-10, 500}), "α = 0.7 ns, B = 500 B/s");
  EXPECT_EQ(describe(Link{0, 1e30}), "α = 0, B = 1e+21 GB/s");
}

}  // namespace
}  // namespace dptrain::cost
