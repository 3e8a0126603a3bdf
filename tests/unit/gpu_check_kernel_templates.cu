// Standalone GPU check of kiln_ops.cuh's vector, shuffle, cp.async and ldmatrix building blocks against the
// semantics the Kernel-IR interpreter gives them (kernel_interpreter_test.cpp, kernel_warp_test.cpp). Not part of
// the CPU test build; on a GPU machine, from the repository root:
//   nvcc -arch=sm_90a -O3 -std=c++17 -Werror all-warnings tests/unit/gpu_check_kernel_templates.cu -o /tmp/check && /tmp/check
#include "../../templates/kiln_ops.cuh"
#include <cstdio>
#include <cmath>
#include <tuple>
#include <vector>

__global__ void vec_bf16(const __nv_bfloat16* __restrict__ in0, __nv_bfloat16* __restrict__ out, int n) {
  int p = blockIdx.x * 64 + threadIdx.x;
  if (p < n / 8) {
    float v0, v1, v2, v3, v4, v5, v6, v7;
    kiln::load_vec<8>(in0 + (p * 8), v0, v1, v2, v3, v4, v5, v6, v7);
    kiln::store_vec<8>(out + (p * 8), v0 * 2 + 1, v1 * 2 + 1, v2 * 2 + 1, v3 * 2 + 1, v4 * 2 + 1, v5 * 2 + 1, v6 * 2 + 1, v7 * 2 + 1);
  }
}
__global__ void vec_f32(const float* __restrict__ in0, float* __restrict__ out, int n) {
  int p = blockIdx.x * 64 + threadIdx.x;
  if (p < n / 4) {
    float v0, v1, v2, v3;
    kiln::load_vec<4>(in0 + (p * 4), v0, v1, v2, v3);
    kiln::store_vec<4>(out + (p * 4), v0 * 2 + 1, v1 * 2 + 1, v2 * 2 + 1, v3 * 2 + 1);
  }
}
__global__ void vec_f16(const __half* __restrict__ in0, __half* __restrict__ out, int n) {
  int p = blockIdx.x * 64 + threadIdx.x;
  if (p < n / 2) {
    float v0, v1;
    kiln::load_vec<2>(in0 + (p * 2), v0, v1);
    kiln::store_vec<2>(out + (p * 2), v0 * 2 + 1, v1 * 2 + 1);
  }
}
__global__ void warp_sum(const float* __restrict__ in0, float* __restrict__ out) {
  float v = in0[threadIdx.x], tmp;
  for (int m = 16; m >= 1; m /= 2) {
    tmp = __shfl_xor_sync(0xffffffffu, v, m);
    v = kiln::add(v, tmp);
  }
  out[threadIdx.x] = v;
}
__global__ void async_copy(const float* __restrict__ in0, float* __restrict__ out) {
  __shared__ __align__(16) float lo[260];
  __shared__ __align__(16) float hi[256];
  int tid = threadIdx.x;
  kiln::cp_async<16>(&lo[tid * 4], &in0[tid * 4]);
  kiln::cp_async_commit();
  kiln::cp_async<16>(&hi[tid * 4], &in0[tid * 4 + 256], min(16, max(0, (244 - tid * 4) * 4)));
  kiln::cp_async_commit();
  kiln::cp_async_wait<1>();
  __syncthreads();
  for (int i = tid; i < 256; i += 64) out[i] = lo[i];
  kiln::cp_async_wait<0>();
  __syncthreads();
  for (int i = tid; i < 256; i += 64) out[i + 256] = hi[i];
}
__global__ void async_copy_small(const float* __restrict__ in0, float* __restrict__ out) {  // 4- and 8-byte .ca copies
  __shared__ __align__(16) float s[128];
  int tid = threadIdx.x;
  kiln::cp_async<8>(&s[tid * 2], &in0[tid * 2]);
  kiln::cp_async<4>(&s[64 + tid], &in0[64 + tid], tid % 2 == 0 ? 4 : 0);
  kiln::cp_async<4>(&s[96 + tid], &in0[96 + tid], tid % 2 == 0 ? 4 : 0);  // every element of s is written
  kiln::cp_async_commit();
  kiln::cp_async_wait<0>();
  __syncthreads();
  for (int i = tid; i < 128; i += 32) out[i] = s[i];
}
template <int Count, bool Trans>
__global__ void ldm(const float* __restrict__ in0, float* __restrict__ out) {
  __shared__ __align__(16) __nv_bfloat16 m[64 * Count];
  int tid = threadIdx.x;
  for (int e = tid; e < 64 * Count; e += 32) m[e] = kiln::from_f32<__nv_bfloat16>(in0[e]);
  __syncthreads();
  float v[8];
  const __nv_bfloat16* row = &m[((tid / 8) % Count) * 64 + (tid % 8) * 8];
  if constexpr (Count == 1) kiln::ldmatrix<1, Trans>(row, v[0], v[1]);
  if constexpr (Count == 2) kiln::ldmatrix<2, Trans>(row, v[0], v[1], v[2], v[3]);
  if constexpr (Count == 4) kiln::ldmatrix<4, Trans>(row, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
  int g = tid / 4, t = tid % 4;
  for (int j = 0; j < Count; ++j)
    for (int h = 0; h < 2; ++h) {
      int col = 2 * t + h;
      out[64 * j + (Trans ? col * 8 + g : g * 8 + col)] = v[2 * j + h];
    }
}

// exp, silu, sigmoid and exp2 (the special-function-unit versions) at n points spread over [-lo, hi].
__global__ void transcendentals(float* __restrict__ out, int n, float lo, float hi) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float x = lo + (hi - lo) * i / (n - 1);
    out[4 * i] = kiln::exp(x);
    out[4 * i + 1] = kiln::silu(x);
    out[4 * i + 2] = kiln::sigmoid(x);
    out[4 * i + 3] = kiln::exp2(x);
  }
}

// max and min of every pair of v (n values): out[2 (a n + b)] = max(v[a], v[b]), out[2 (a n + b) + 1] = min.
__global__ void extrema(const float* __restrict__ v, float* __restrict__ out, int n) {
  int a = threadIdx.x / n, b = threadIdx.x % n;
  if (a < n) {
    out[2 * threadIdx.x] = kiln::max(v[a], v[b]);
    out[2 * threadIdx.x + 1] = kiln::min(v[a], v[b]);
  }
}

static int failures = 0;
static void expect(bool ok, const char* what, int i, float got, float want) {
  if (!ok && failures++ < 10) printf("FAIL %s at %d: got %g want %g\n", what, i, got, want);
}

int main() {
  const int n = 512;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = std::sin(0.37f * i) + 0.5f;
  float *dx, *dy;
  cudaMalloc(&dx, n * 4);
  cudaMalloc(&dy, n * 4);
  cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice);
  std::vector<float> y(n);
  // f32 vectors
  cudaMemset(dy, 0xff, n * 4);
  vec_f32<<<2, 64>>>(dx, dy, n);
  cudaMemcpy(y.data(), dy, n * 4, cudaMemcpyDeviceToHost);
  for (int i = 0; i < n; ++i) expect(y[i] == x[i] * 2 + 1, "vec f32", i, y[i], x[i] * 2 + 1);
  // bf16 and f16 vectors
  {
    std::vector<__nv_bfloat16> xb(n), yb(n);
    std::vector<__half> xh(n), yh(n);
    for (int i = 0; i < n; ++i) { xb[i] = __float2bfloat16_rn(x[i]); xh[i] = __float2half_rn(x[i]); }
    __nv_bfloat16 *db, *dob; __half *dh, *doh;
    cudaMalloc(&db, n * 2); cudaMalloc(&dob, n * 2); cudaMalloc(&dh, n * 2); cudaMalloc(&doh, n * 2);
    cudaMemcpy(db, xb.data(), n * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dh, xh.data(), n * 2, cudaMemcpyHostToDevice);
    vec_bf16<<<1, 64>>>(db, dob, n);
    vec_f16<<<4, 64>>>(dh, doh, n);
    cudaMemcpy(yb.data(), dob, n * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(yh.data(), doh, n * 2, cudaMemcpyDeviceToHost);
    for (int i = 0; i < n; ++i) {
      float wb = __bfloat162float(__float2bfloat16_rn(__bfloat162float(xb[i]) * 2 + 1));
      float wh = __half2float(__float2half_rn(__half2float(xh[i]) * 2 + 1));
      expect(__bfloat162float(yb[i]) == wb, "vec bf16", i, __bfloat162float(yb[i]), wb);
      expect(__half2float(yh[i]) == wh, "vec f16", i, __half2float(yh[i]), wh);
    }
  }
  // warp all-reduce
  warp_sum<<<1, 64>>>(dx, dy);
  cudaMemcpy(y.data(), dy, 64 * 4, cudaMemcpyDeviceToHost);
  for (int w = 0; w < 2; ++w) {
    double s = 0;
    for (int l = 0; l < 32; ++l) s += x[w * 32 + l];
    for (int l = 0; l < 32; ++l) {
      expect(y[w * 32 + l] == y[w * 32], "shfl lanes agree", l, y[w * 32 + l], y[w * 32]);
      expect(std::fabs(y[w * 32 + l] - s) < 1e-4, "shfl sum", l, y[w * 32 + l], s);
    }
  }
  // cp.async
  cudaMemset(dy, 0xff, n * 4);
  async_copy<<<1, 64>>>(dx, dy);
  cudaMemcpy(y.data(), dy, n * 4, cudaMemcpyDeviceToHost);
  for (int i = 0; i < n; ++i) expect(y[i] == (i < 500 ? x[i] : 0.f), "cp.async16", i, y[i], i < 500 ? x[i] : 0.f);
  cudaMemset(dy, 0xff, n * 4);
  async_copy_small<<<1, 32>>>(dx, dy);
  cudaMemcpy(y.data(), dy, 128 * 4, cudaMemcpyDeviceToHost);
  for (int i = 0; i < 128; ++i) {
    float want = i < 64 || (i - 64) % 2 == 0 ? x[i] : 0.f;
    expect(y[i] == want, "cp.async 8/4", i, y[i], want);
  }
  // ldmatrix
  auto checkLdm = [&](auto kernel, int count, const char* what) {
    cudaMemset(dy, 0xff, n * 4);
    kernel<<<1, 32>>>(dx, dy);
    cudaMemcpy(y.data(), dy, 256 * 4, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 64 * count; ++i) {
      float want = __bfloat162float(__float2bfloat16_rn(x[i]));
      expect(y[i] == want, what, i, y[i], want);
    }
  };
  checkLdm(ldm<1, false>, 1, "ldmatrix.x1");
  checkLdm(ldm<1, true>, 1, "ldmatrix.x1.trans");
  checkLdm(ldm<2, false>, 2, "ldmatrix.x2");
  checkLdm(ldm<2, true>, 2, "ldmatrix.x2.trans");
  checkLdm(ldm<4, false>, 4, "ldmatrix.x4");
  checkLdm(ldm<4, true>, 4, "ldmatrix.x4.trans");
  // exp / silu / sigmoid / exp2 against double precision: relative error within 4e-6 where |x| <= 20 (the bound
  // kiln_ops.cuh states), and the right limits beyond, to 1e-5 (silu(-100) = -0, sigmoid(100) = 1, exp(-100) = 0).
  {
    const int m = 4001;
    float* dt;
    cudaMalloc(&dt, 4 * m * 4);
    std::vector<float> t(4 * m);
    for (auto [lo, hi, tol] : {std::tuple{-20.f, 20.f, 4e-6}, std::tuple{-100.f, 100.f, -1.0}}) {
      transcendentals<<<(m + 127) / 128, 128>>>(dt, m, lo, hi);
      cudaMemcpy(t.data(), dt, 4 * m * 4, cudaMemcpyDeviceToHost);
      for (int i = 0; i < m; ++i) {
        float xf = lo + (hi - lo) * i / (m - 1);
        double x = xf, e = std::exp(x), want[4] = {e, x / (1 + std::exp(-x)), 1 / (1 + std::exp(-x)), std::exp2(x)};
        for (int f = 0; f < 4; ++f) {
          double got = t[4 * i + f], err = std::fabs(got - want[f]);
          if ((f == 0 && x > 88) || (f == 3 && (x > 127 || x < -126))) continue;  // beyond the largest float, or subnormal
          bool ok = err <= (tol > 0 ? tol : 1e-5) * std::fabs(want[f]) + 1e-30;
          expect(ok, f == 0 ? "exp" : f == 1 ? "silu" : f == 2 ? "sigmoid" : "exp2", i, static_cast<float>(got), static_cast<float>(want[f]));
        }
      }
    }
    cudaFree(dt);
  }
  // max / min propagate NaN from either side, as tensor::applyFn (a > b || isnan(a) ? a : b) does.
  {
    const std::vector<float> v = {1.f, -1.f, 0.f, -0.f, INFINITY, -INFINITY, NAN, 2.5f};
    const int k = static_cast<int>(v.size());
    float *dv, *dm;
    cudaMalloc(&dv, k * 4);
    cudaMalloc(&dm, 2 * k * k * 4);
    cudaMemcpy(dv, v.data(), k * 4, cudaMemcpyHostToDevice);
    extrema<<<1, k * k>>>(dv, dm, k);
    std::vector<float> m(2 * k * k);
    cudaMemcpy(m.data(), dm, 2 * k * k * 4, cudaMemcpyDeviceToHost);
    for (int a = 0; a < k; ++a)
      for (int b = 0; b < k; ++b) {
        const float want[2] = {v[a] > v[b] || std::isnan(v[a]) ? v[a] : v[b], v[a] < v[b] || std::isnan(v[a]) ? v[a] : v[b]};
        for (int f = 0; f < 2; ++f) {
          const float got = m[2 * (a * k + b) + f];
          expect(std::isnan(want[f]) ? std::isnan(got) : got == want[f], f == 0 ? "max" : "min", a * k + b, got, want[f]);
        }
      }
    cudaFree(dv);
    cudaFree(dm);
  }
  cudaError_t err = cudaDeviceSynchronize();
  printf("cuda: %s\n", cudaGetErrorString(err));
  printf(failures || err != cudaSuccess ? "FAILED (%d)\n" : "PASSED (%d failures)\n", failures);
  return failures != 0;
}
