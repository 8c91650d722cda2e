// Number formatting, Markdown tables and the `--gpus` list.
#include <gtest/gtest.h>

#include "dptrain/core/error.hpp"
#include "dptrain/cost/format.hpp"
#include "dptrain/cost/scenario.hpp"

namespace dptrain::cost {
namespace {

TEST(Format, Seconds) {
  EXPECT_EQ(format_seconds(0.05247782848), "52.5 ms");
  EXPECT_EQ(format_seconds(0.17971398336), "179.7 ms");
  EXPECT_EQ(format_seconds(13.132878620851352), "13.13 s");
  EXPECT_EQ(format_seconds(70e-6), "70.0 µs");
  EXPECT_EQ(format_seconds(12e-9), "12.0 ns");
  EXPECT_EQ(format_seconds(0.3e-9), "0.3 ns");
  EXPECT_EQ(format_seconds(0), "0 s");
  EXPECT_EQ(format_seconds(0.99996), "1.00 s");  // rounds up into the next unit, not "1000.0 ms"
  EXPECT_EQ(format_seconds(0.99994), "1.00 s");
  EXPECT_EQ(format_seconds(0.9949), "994.9 ms");
}

TEST(Format, Bytes) {
  EXPECT_EQ(format_bytes(13'476'298'752), "13.48 GB");
  EXPECT_EQ(format_bytes(1'684'537'344), "1.68 GB");
  EXPECT_EQ(format_bytes(107'810'390'016), "107.81 GB");
  EXPECT_EQ(format_bytes(512e3), "512.00 KB");
  EXPECT_EQ(format_bytes(6.5e6), "6.50 MB");
  const double table[] = {210.57e6, 25.27e9, 0};
  EXPECT_EQ(format_bytes_in_one_unit(table), (std::vector<std::string>{"210.57 MB", "25270.00 MB", "0 MB"}));
  const double reference[] = {1'684'537'344, 107'810'390'016};
  EXPECT_EQ(format_bytes_in_one_unit(reference), (std::vector<std::string>{"1.68 GB", "107.81 GB"}));
  const double zeros[] = {0, 0};
  EXPECT_EQ(format_bytes_in_one_unit(zeros), (std::vector<std::string>{"0 B", "0 B"}));
  EXPECT_EQ(format_bytes(12), "12 B");
  // A billion of the largest unit or more: exponent form (a near-zero η makes steps of 1e290 s).
  EXPECT_EQ(format_seconds(1e290), "1.000e+290 s");
  EXPECT_EQ(format_seconds(999'999'999), "999999999.00 s");
  const double huge[] = {2, 13'476'298'752};
  EXPECT_EQ(format_bytes_in_one_unit(huge), (std::vector<std::string>{"2 B", "1.348e+10 B"}));
  EXPECT_EQ(format_bytes(0), "0 B");
}

TEST(Format, PercentFlopsCount) {
  EXPECT_EQ(format_percent(0.473), "47.3%");
  EXPECT_EQ(format_percent(0.47111745606), "47.1%");
  EXPECT_EQ(format_flops(46'871'347'200), "46.87 GFLOP");
  EXPECT_EQ(format_flops(4.91481697615872e16), "49.15 PFLOP");
  EXPECT_EQ(format_count(6'738'149'376), "6,738,149,376");
  EXPECT_EQ(format_count(1'048'576), "1,048,576");
  EXPECT_EQ(format_count(999), "999");
  EXPECT_EQ(format_count(1000), "1,000");
  EXPECT_EQ(format_count(0), "0");
  EXPECT_EQ(format_count(-1234), "-1,234");
}

TEST(Format, MarkdownTableLikeSystemsModel) {
  MarkdownTable table({"where", "collective", "time", "bytes each GPU sends"});
  table.add_row({"NVLink, 8 GPUs", "ring all-reduce", "52.5 ms", "23.58 GB"});
  EXPECT_EQ(table.str(),
            "| where | collective | time | bytes each GPU sends |\n"
            "|---|---|---|---|\n"
            "| NVLink, 8 GPUs | ring all-reduce | 52.5 ms | 23.58 GB |\n");
  EXPECT_THROW(table.add_row({"too", "few"}), std::logic_error);
}

TEST(GpuList, SingleAndExplicitLists) {
  EXPECT_EQ(parse_gpu_list("8"), (std::vector<int>{8}));
  EXPECT_EQ(parse_gpu_list("2,4,8"), (std::vector<int>{2, 4, 8}));
  EXPECT_EQ(parse_gpu_list("1,3,64"), (std::vector<int>{1, 3, 64}));
}

TEST(GpuList, EllipsisContinuesGeometricallyOrArithmetically) {
  EXPECT_EQ(parse_gpu_list("2,4,8,...,1024"), (std::vector<int>{2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}));
  EXPECT_EQ(parse_gpu_list("2,4,...,16"), (std::vector<int>{2, 4, 8, 16}));  // geometric first
  EXPECT_EQ(parse_gpu_list("1,2,...,5"), (std::vector<int>{1, 2, 3, 4, 5}));  // 5 is no power of 2
  EXPECT_EQ(parse_gpu_list("8,16,...,40"), (std::vector<int>{8, 16, 24, 32, 40}));
  EXPECT_EQ(parse_gpu_list("1,4,...,64,100"), (std::vector<int>{1, 4, 16, 64, 100}));
  EXPECT_EQ(parse_gpu_list("1,3,…,9"), (std::vector<int>{1, 3, 9}));
}

TEST(GpuList, RefusesBadLists) {
  for (const char* bad : {"", "0", "-8", "eight", "8,", "8,4", "8,8", "2,...,8", "...,8", "2,4,...", "2,4,...,...,8",
                          "2,4,...,9", "8.5", "1,2,...,100000"}) {
    EXPECT_THROW(parse_gpu_list(bad), UserError) << "'" << bad << "'";
  }
}

}  // namespace
}  // namespace dptrain::cost
