#include <charconv>

#include "kiln/frontend/frontend.h"
#include "kiln/support/error.h"

namespace kiln::frontend {

InputOverride parseInputOverride(const std::string& text) {
  auto bad = [&](const char* why) {
    usageError("bad --input '{}': {}; expected NAME=DIMxDIMx...[:DTYPE], e.g. x=1x32x2048:f32, or NAME=scalar[:DTYPE] for "
               "a 0-d tensor", text, why);
  };
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) bad("missing NAME=");
  InputOverride o;
  o.name = text.substr(0, eq);
  std::string rest = text.substr(eq + 1);
  if (auto colon = rest.find(':'); colon != std::string::npos) {
    o.dtype = parseDType(rest.substr(colon + 1));
    if (!o.dtype) bad("unknown dtype (use f32, f16, bf16, i64 or bool)");
    rest = rest.substr(0, colon);
  }
  if (rest.empty()) bad("missing shape");
  if (rest == "scalar") return o;  // a 0-d tensor: no dimensions, one element
  size_t pos = 0;
  while (pos <= rest.size()) {
    size_t x = rest.find('x', pos);
    std::string dim = rest.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
    int64_t v = 0;
    auto [p, ec] = std::from_chars(dim.data(), dim.data() + dim.size(), v);
    if (dim.empty() || ec != std::errc() || p != dim.data() + dim.size() || v <= 0) bad("dimensions must be positive integers");
    o.shape.push_back(v);
    int64_t elements = 1;
    for (int64_t d : o.shape)
      if (__builtin_mul_overflow(elements, d, &elements) || elements > kMaxInputElements)
        bad("more than 2^31 elements in one input (kiln's limit)");
    if (x == std::string::npos) break;
    pos = x + 1;
  }
  return o;
}

}  // namespace kiln::frontend
