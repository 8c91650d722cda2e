// How the systems model prints numbers (docs/systems-model.md: 10^9 bytes per GB; "52.5 ms", "23.58 GB") and the
// Markdown tables it prints them in.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dptrain::cost {

// Seconds with the largest unit that keeps the value ≥ 1: "13.13 s", "52.5 ms", "70.0 µs", "12.0 ns"
// (two decimals for seconds, one below).
std::string format_seconds(double seconds);
// Bytes in powers of 10^3, two decimals: "23.58 GB", "1.68 GB", "512.00 KB", "12 B". GB is the largest unit.
std::string format_bytes(double bytes);
// Bytes of one table in one unit, so that its columns read alike: format_bytes' unit of the smallest non-zero value
// ("1.68 GB" beside "107.81 GB", the ZeRO table of docs/systems-model.md; "34.18 KB" beside "615.17 KB" for a
// small model, not "0.00 GB"). All zero: GB.
std::vector<std::string> format_bytes_in_one_unit(std::span<const double> bytes);
// A fraction as a percentage, one decimal: 0.4729 → "47.3%".
std::string format_percent(double fraction);
// FLOPs with an SI prefix, two decimals: "46.87 GFLOP".
std::string format_flops(double flops);
// Thousands separated by commas: 6738149376 → "6,738,149,376".
std::string format_count(std::int64_t count);

// A GitHub-flavoured Markdown table, unpadded, exactly as docs/systems-model.md writes its tables.
class MarkdownTable {
 public:
  explicit MarkdownTable(std::vector<std::string> header);
  void add_row(std::vector<std::string> cells);  // as many cells as the header (a logic error otherwise)
  std::string str() const;                       // header, |---| line, rows; each line ends with '\n'

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace dptrain::cost
