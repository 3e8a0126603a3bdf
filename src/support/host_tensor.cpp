#include "kiln/support/host_tensor.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "kiln/support/error.h"

namespace kiln {
namespace {

uint16_t toBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

float fromBf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

HostTensor randomTensor(DType dtype, const Shape& shape, uint64_t seed) {
  HostTensor t{dtype, shape, std::vector<float>(numel(shape))};
  std::mt19937_64 rng(seed);
  if (dtype == DType::I64 || dtype == DType::Bool) {
    std::uniform_int_distribution<int> d(0, dtype == DType::Bool ? 1 : 7);
    for (float& v : t.values) v = static_cast<float>(d(rng));
  } else {
    std::normal_distribution<float> d(0.f, 1.f);
    for (float& v : t.values) v = d(rng);
    if (dtype == DType::BF16)
      for (float& v : t.values) v = fromBf16(toBf16(v));
    if (dtype == DType::F16)
      for (float& v : t.values) v = static_cast<float>(static_cast<_Float16>(v));
  }
  return t;
}

std::vector<std::byte> toBytes(const HostTensor& t) {
  size_t n = t.values.size();
  std::vector<std::byte> out(n * dtypeBytes(t.dtype));
  for (size_t i = 0; i < n; ++i) {
    float v = t.values[i];
    switch (t.dtype) {
      case DType::F32: std::memcpy(&out[i * 4], &v, 4); break;
      case DType::BF16: {
        uint16_t h = toBf16(v);
        std::memcpy(&out[i * 2], &h, 2);
        break;
      }
      case DType::F16: {
        _Float16 h = static_cast<_Float16>(v);
        std::memcpy(&out[i * 2], &h, 2);
        break;
      }
      case DType::I64: {
        int64_t x = static_cast<int64_t>(v);
        std::memcpy(&out[i * 8], &x, 8);
        break;
      }
      case DType::Bool: out[i] = static_cast<std::byte>(v != 0); break;
    }
  }
  return out;
}

HostTensor fromBytes(DType dtype, const Shape& shape, const std::vector<std::byte>& bytes) {
  HostTensor t{dtype, shape, std::vector<float>(numel(shape))};
  KILN_ASSERT(bytes.size() == t.values.size() * dtypeBytes(dtype), "{} bytes for {} {} elements", bytes.size(),
              t.values.size(), dtypeName(dtype));
  for (size_t i = 0; i < t.values.size(); ++i) {
    switch (dtype) {
      case DType::F32: std::memcpy(&t.values[i], &bytes[i * 4], 4); break;
      case DType::BF16: {
        uint16_t h;
        std::memcpy(&h, &bytes[i * 2], 2);
        t.values[i] = fromBf16(h);
        break;
      }
      case DType::F16: {
        _Float16 h;
        std::memcpy(&h, &bytes[i * 2], 2);
        t.values[i] = static_cast<float>(h);
        break;
      }
      case DType::I64: {
        int64_t x;
        std::memcpy(&x, &bytes[i * 8], 8);
        t.values[i] = static_cast<float>(x);
        break;
      }
      case DType::Bool: t.values[i] = bytes[i] != std::byte{0} ? 1.f : 0.f; break;
    }
  }
  return t;
}

Comparison compare(const HostTensor& out, const HostTensor& ref) {
  Comparison c;
  if (out.shape != ref.shape || out.values.size() != ref.values.size()) {
    c.shapeMismatch = true;
    return c;
  }
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < out.values.size(); ++i) {
    double o = out.values[i], r = ref.values[i];
    if (!std::isfinite(o) || !std::isfinite(r)) {
      const bool same = (std::isnan(o) && std::isnan(r)) || o == r;  // NaN and NaN, or one infinity and the same one
      if (!same) ++c.nonFiniteMismatches;
      continue;
    }
    diff2 += (o - r) * (o - r);
    ref2 += r * r;
    c.maxAbs = std::max(c.maxAbs, std::abs(o - r));
  }
  c.relL2 = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  if (c.nonFiniteMismatches > 0) c.relL2 = c.maxAbs = std::numeric_limits<double>::quiet_NaN();
  return c;
}

bool allFinite(const HostTensor& t) {
  for (float v : t.values)
    if (!std::isfinite(v)) return false;
  return true;
}

double tolerance(DType dtype) {
  if (dtype == DType::I64 || dtype == DType::Bool) return 0.0;  // integers and truth values match exactly
  return dtype == DType::F32 ? 1e-5 : 2e-2;
}

bool passesAgainstF32(const Comparison& kiln, const Comparison& libtorch) {
  return !kiln.shapeMismatch && kiln.nonFiniteMismatches == 0 && std::isfinite(kiln.relL2) && std::isfinite(libtorch.relL2) &&
         kiln.relL2 <= kLowPrecisionErrorRatio * libtorch.relL2 + kLowPrecisionErrorSlack;
}

bool passes(const Comparison& c, DType dtype) {
  return !c.shapeMismatch && c.nonFiniteMismatches == 0 && std::isfinite(c.relL2) && c.relL2 <= tolerance(dtype);
}

}  // namespace kiln
