// Errors. A UserError is bad input (flag, config, data file, checkpoint): one line naming what was wrong, the
// value and what would be accepted; the program exits 2. Anything else that escapes is an internal failure.
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace dptrain {

class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr int kExitBadInput = 2;
// A collective that did not complete within --comm-timeout (a stopped or dead peer, a dead link).
inline constexpr int kExitCommunication = 4;

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw UserError(fmt::format(format, std::forward<Args>(args)...));
}

template <typename... Args>
void require(bool condition, fmt::format_string<Args...> format, Args&&... args) {
  if (!condition) throw UserError(fmt::format(format, std::forward<Args>(args)...));
}

// Internal invariant: a bug, not bad input.
#define DP_ASSERT(cond)                                                                                  \
  do {                                                                                                   \
    if (!(cond)) throw std::logic_error(fmt::format("{}:{}: assertion failed: {}", __FILE__, __LINE__, #cond)); \
  } while (0)

}  // namespace dptrain
