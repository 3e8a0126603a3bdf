#include "kiln/support/dtype.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kiln {

std::string_view dtypeName(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I64: return "i64";
    case DType::Bool: return "bool";
  }
  return "?";
}

std::optional<DType> parseDType(std::string_view s) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I64, DType::Bool})
    if (dtypeName(t) == s) return t;
  return std::nullopt;
}

int dtypeBytes(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16:
    case DType::BF16: return 2;
    case DType::I64: return 8;
    case DType::Bool: return 1;
  }
  return 0;
}

std::string_view cudaTypeName(DType t) {
  switch (t) {
    case DType::F32: return "float";
    case DType::F16: return "__half";
    case DType::BF16: return "__nv_bfloat16";
    case DType::I64: return "long long";
    case DType::Bool: return "bool";
  }
  return "?";
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shapeString(const Shape& s) {
  if (s.empty()) return "scalar";
  return fmt::format("{}", fmt::join(s, "x"));
}

}  // namespace kiln
