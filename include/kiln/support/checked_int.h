// Arithmetic on sizes, offsets and strides read from untrusted files (archives, manifests): the exact result, or
// nullopt where it does not fit in int64_t, so that a check built on it cannot be bypassed by a wrap-around.
#pragma once
#include <cstdint>
#include <optional>

namespace kiln {

inline std::optional<int64_t> checkedAdd(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<int64_t> checkedMul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

}  // namespace kiln
