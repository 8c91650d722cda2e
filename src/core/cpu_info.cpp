#include "dptrain/core/cpu_info.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <ranges>
#include <sstream>

#include "dptrain/core/error.hpp"

namespace dptrain {

namespace {

// The value of the first line "key<spaces>: value" of `text`, empty where there is none.
std::string_view first_value(std::string_view text, std::string_view key) {
  for (const auto part : std::views::split(text, '\n')) {
    const std::string_view line(part.begin(), part.end());
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view name = line.substr(0, colon);
    while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.remove_suffix(1);
    if (name != key) continue;
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    return value;
  }
  return {};
}

bool is_vector_extension(std::string_view flag) {
  return flag == "avx" || flag == "avx2" || flag == "fma" || flag.starts_with("avx512") || flag.starts_with("amx");
}

}  // namespace

std::string CpuInfo::description() const {
  if (vector_extensions.empty()) return model + " (no vector extensions)";
  return fmt::format("{} ({})", model, fmt::join(vector_extensions, " "));
}

CpuInfo parse_cpuinfo(std::string_view text) {
  CpuInfo info;
  if (const std::string_view model = first_value(text, "model name"); !model.empty()) info.model = model;
  for (const auto part : std::views::split(first_value(text, "flags"), ' ')) {
    const std::string_view flag(part.begin(), part.end());
    if (is_vector_extension(flag)) info.vector_extensions.emplace_back(flag);
  }
  return info;
}

CpuInfo host_cpu_info() {
  const char* path = std::getenv("DPTRAIN_CPUINFO");
  std::ifstream in(path && *path ? path : "/proc/cpuinfo");
  // A file the user named must be there; a missing /proc/cpuinfo (not Linux) reads as a CPU without extensions.
  // A folder opens, and would read as a CPU without extensions; a pipe might never end: a file it must be.
  std::error_code error;
  require(!(path && *path) || (in.is_open() && std::filesystem::is_regular_file(path, error)),
          "DPTRAIN_CPUINFO: cannot read '{}' (expected a file in the format of /proc/cpuinfo, or unset it)", path);
  std::ostringstream text;
  text << in.rdbuf();
  return parse_cpuinfo(text.str());
}

}  // namespace dptrain
