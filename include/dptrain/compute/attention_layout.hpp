// Attention's tensors as 4-d strided views [B, NH, T, hs] of the model's row-major arrays, in the (dims, strides)
// form of cuDNN's tensor descriptors: q, k and v (and their gradients) where they lie in qkv[B,T,3C], the output
// (and its gradient) where it lies in out[B,T,C], and a fused attention's row statistics [B,NH,T,1] (fp32). A
// fused attention reads and writes them in place: no permutes.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

namespace dptrain {

struct HeadsView {
  std::array<std::int64_t, 4> dims{}, strides{};  // [B, NH, T, hs] (statistics: [B, NH, T, 1])
  std::int64_t offset = 0;                        // elements from the array's start to element (0, 0, 0, 0)
  std::int64_t at(std::int64_t b, std::int64_t h, std::int64_t t, std::int64_t d) const {
    return offset + b * strides[0] + h * strides[1] + t * strides[2] + d * strides[3];
  }
};

enum class QkvPart { q = 0, k = 1, v = 2 };

// Element (b, h, t, d) of part p is qkv[(b·T + t)·3C + p·C + h·hs + d].
inline HeadsView qkv_heads(std::size_t B, std::size_t T, std::size_t C, std::size_t NH, QkvPart part) {
  const auto b = std::int64_t(B), t = std::int64_t(T), c = std::int64_t(C), nh = std::int64_t(NH), hs = c / nh;
  return {{b, nh, t, hs}, {t * 3 * c, hs, 3 * c, 1}, std::int64_t(part) * c};
}
// Element (b, h, t, d) is out[(b·T + t)·C + h·hs + d].
inline HeadsView out_heads(std::size_t B, std::size_t T, std::size_t C, std::size_t NH) {
  const auto b = std::int64_t(B), t = std::int64_t(T), c = std::int64_t(C), nh = std::int64_t(NH), hs = c / nh;
  return {{b, nh, t, hs}, {t * c, hs, c, 1}, 0};
}
// Element (b, h, t, 0) is stats[(b·NH + h)·T + t].
inline HeadsView stats_rows(std::size_t B, std::size_t T, std::size_t NH) {
  const auto b = std::int64_t(B), t = std::int64_t(T), nh = std::int64_t(NH);
  return {{b, nh, t, 1}, {nh * t, t, 1, 1}, 0};
}

}  // namespace dptrain
