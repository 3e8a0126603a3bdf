// kiln's scalar building blocks for emitted kernels. Each definition matches tensor::applyFn (the CPU
// interpreters' semantics) so the GPU and the interpreters compute the same function.
// Compiles on its own under nvcc (tests include it in an otherwise empty translation unit).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace kiln {

__device__ __forceinline__ float neg(float a) { return -a; }
__device__ __forceinline__ float exp(float a) { return expf(a); }
__device__ __forceinline__ float rsqrt(float a) { return 1.0f / sqrtf(a); }
__device__ __forceinline__ float sqrt(float a) { return sqrtf(a); }
__device__ __forceinline__ float relu(float a) { return a > 0.0f ? a : 0.0f; }
__device__ __forceinline__ float silu(float a) { return a / (1.0f + expf(-a)); }
__device__ __forceinline__ float sigmoid(float a) { return 1.0f / (1.0f + expf(-a)); }
__device__ __forceinline__ float tanh(float a) { return tanhf(a); }
__device__ __forceinline__ float gelu(float a) { return 0.5f * a * (1.0f + erff(a * 0.70710678118654752f)); }
__device__ __forceinline__ float gelu_tanh(float a) {
  return 0.5f * a * (1.0f + tanhf(0.79788456080286536f * (a + 0.044715f * a * a * a)));
}
__device__ __forceinline__ float cos(float a) { return cosf(a); }
__device__ __forceinline__ float sin(float a) { return sinf(a); }
__device__ __forceinline__ float logical_not(float a) { return a == 0.0f ? 1.0f : 0.0f; }
__device__ __forceinline__ float lt(float a, float b) { return a < b ? 1.0f : 0.0f; }
__device__ __forceinline__ float le(float a, float b) { return a <= b ? 1.0f : 0.0f; }
__device__ __forceinline__ float gt(float a, float b) { return a > b ? 1.0f : 0.0f; }
__device__ __forceinline__ float ge(float a, float b) { return a >= b ? 1.0f : 0.0f; }
__device__ __forceinline__ float eq(float a, float b) { return a == b ? 1.0f : 0.0f; }
__device__ __forceinline__ float ne(float a, float b) { return a != b ? 1.0f : 0.0f; }
__device__ __forceinline__ float logical_and(float a, float b) { return (a != 0.0f && b != 0.0f) ? 1.0f : 0.0f; }
__device__ __forceinline__ float where(float c, float a, float b) { return c != 0.0f ? a : b; }
__device__ __forceinline__ float add(float a, float b) { return a + b; }
__device__ __forceinline__ float sub(float a, float b) { return a - b; }
__device__ __forceinline__ float mul(float a, float b) { return a * b; }
__device__ __forceinline__ float div(float a, float b) { return a / b; }
__device__ __forceinline__ float pow(float a, float b) { return b == 2.0f ? a * a : powf(a, b); }
// NaN-propagating, as torch.maximum/amax.
__device__ __forceinline__ float max(float a, float b) { return (a > b || a != a) ? a : b; }
__device__ __forceinline__ float min(float a, float b) { return (a < b || a != a) ? a : b; }

// Storage conversions: kernels compute in f32 whatever the buffer's type.
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(long long v) { return static_cast<float>(v); }
__device__ __forceinline__ float to_f32(bool v) { return v ? 1.0f : 0.0f; }

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ long long from_f32<long long>(float v) { return static_cast<long long>(v); }
template <>
__device__ __forceinline__ bool from_f32<bool>(float v) { return v != 0.0f; }

// Rounds through a storage type (Cast).
template <typename T>
__device__ __forceinline__ float round_to(float v) { return to_f32(from_f32<T>(v)); }

}  // namespace kiln
