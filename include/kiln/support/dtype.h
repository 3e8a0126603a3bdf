// Element types kiln knows. Kernels compute in f32; f16/bf16 are storage types (accumulation in f32).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

enum class DType { F32, F16, BF16, I64, Bool };

std::string_view dtypeName(DType t);                 // "f32", "bf16", ...
std::optional<DType> parseDType(std::string_view s);  // inverse of dtypeName
int dtypeBytes(DType t);
std::string_view cudaTypeName(DType t);              // "float", "__nv_bfloat16", ...

using Shape = std::vector<int64_t>;
int64_t numel(const Shape& s);
std::string shapeString(const Shape& s);             // "2x16x64"; "scalar" for rank 0

}  // namespace kiln
