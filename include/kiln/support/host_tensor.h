// A tensor in host memory, exchanged between the frontend's LibTorch reference, the CPU interpreters and
// the runtime without any of them seeing the others' types. Values are held in f32 whatever the dtype
// (bf16/f16 round-trip exactly; i64 token ids below 2^24 are exact).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/support/dtype.h"

namespace kiln {

struct HostTensor {
  DType dtype = DType::F32;
  Shape shape;
  std::vector<float> values;
};

// Fresh random inputs (never zeros): normal(0, 1) for floating types, uniform in [0, 8) for i64.
HostTensor randomTensor(DType dtype, const Shape& shape, uint64_t seed);

// Element bytes in the tensor's dtype (what the runtime copies to the GPU), and back.
std::vector<std::byte> toBytes(const HostTensor& t);
HostTensor fromBytes(DType dtype, const Shape& shape, const std::vector<std::byte>& bytes);

// out against ref. NaN and infinities must agree in position (and an infinity in sign): those that do are left out of
// the figures, which compare the finite values; any that do not make relL2 and maxAbs NaN and never pass.
struct Comparison {
  double relL2 = 0;      // ||out - ref|| / ||ref|| over the finite positions; NaN where non-finite values disagree
  double maxAbs = 0;     // the largest |out - ref| there; NaN likewise
  int64_t nonFiniteMismatches = 0;  // positions where out or ref is NaN or infinite and the other is not the same
  bool shapeMismatch = false;
};
Comparison compare(const HostTensor& out, const HostTensor& ref);
// No NaN and no infinity among t's values.
bool allFinite(const HostTensor& t);
// DESIGN.md §4: f32 <= 1e-5; bf16/f16 (f32 accumulation) <= 2e-2.
double tolerance(DType dtype);  // rel L2: 1e-5 f32, 2e-2 bf16/f16, 0 (exact) i64 and bool
bool passes(const Comparison& c, DType dtype);
// DESIGN.md §4 for bf16/f16: kiln and LibTorch, both computing in the low-precision type, are each compared with
// an f32 evaluation of the same rounded weights and inputs; kiln passes when its error is at most
// kLowPrecisionErrorRatio x LibTorch's + kLowPrecisionErrorSlack (two low-precision results compared with each
// other double the noise and say nothing about which is off). NaN or a shape mismatch never passes.
constexpr double kLowPrecisionErrorRatio = 1.5;
constexpr double kLowPrecisionErrorSlack = 1e-3;
bool passesAgainstF32(const Comparison& kiln, const Comparison& libtorch);

}  // namespace kiln
