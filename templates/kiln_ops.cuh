// kiln's scalar building blocks for emitted kernels. Each definition matches tensor::applyFn (the CPU
// interpreters' semantics) so the GPU and the interpreters compute the same function, with one difference of
// precision: exp, exp2, silu and sigmoid use the special-function unit (ex2.approx.ftz after scaling by log2(e), an
// approximate reciprocal instead of a division), below 4e-6 relative error for |x| <= 20 (checked on the GPU by
// tests/unit/gpu_check_kernel_templates.cu), inside the f32 check's 1e-5; an exp below 2^-126 (x < -87.3) is 0. The
// accurate expf and the IEEE division cost about 25 instructions an element, enough to make a softmax or a SiLU·mul
// bound by instruction issue rather than by memory; ex2.approx without .ftz costs four (it rescales subnormals), with
// .ftz one, beside the multiplication by log2(e).
// Compiles on its own under nvcc (tests include it in an otherwise empty translation unit).
#pragma once
#include <cuda.h>  // CUtensorMap, the type of TMA tensor-map parameters
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

namespace kiln {

// The 32-bit shared-state-space address of a pointer into shared memory, as the PTX instructions below take it.
__device__ __forceinline__ unsigned shared_address(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ float neg(float a) { return -a; }
__device__ __forceinline__ float exp(float a) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a * 1.4426950408889634f));
  return r;
}
// 2^a: ex2.approx.ftz alone (flash attention's softmax works in base 2, log2(e) folded into its scale).
__device__ __forceinline__ float exp2(float a) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a));
  return r;
}
__device__ __forceinline__ float rsqrt(float a) { return 1.0f / sqrtf(a); }
__device__ __forceinline__ float sqrt(float a) { return sqrtf(a); }
// NaN and -0 pass through, as PyTorch's relu does.
__device__ __forceinline__ float relu(float a) { return a < 0.0f ? 0.0f : a; }
// __fdividef(a, d): a * (1/d) by the approximate reciprocal; d = inf (a < -88) gives -0 as a / inf does, and the
// 0 it returns for 2^126 < d < 2^128 is the exact quotient's |a| / d < 1e-36 rounded away.
__device__ __forceinline__ float silu(float a) { return __fdividef(a, 1.0f + exp(-a)); }
__device__ __forceinline__ float sigmoid(float a) { return __fdividef(1.0f, 1.0f + exp(-a)); }
__device__ __forceinline__ float tanh(float a) { return tanhf(a); }
__device__ __forceinline__ float abs(float a) { return fabsf(a); }
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
// NaN-propagating, as torch.maximum/amax: one FMNMX.NAN on sm_80+ (max.NaN.f32), three instructions before.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
__device__ __forceinline__ float max(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
__device__ __forceinline__ float min(float a, float b) {
  float r;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
#else
__device__ __forceinline__ float max(float a, float b) { return (a > b || a != a) ? a : b; }
__device__ __forceinline__ float min(float a, float b) { return (a < b || a != a) ? a : b; }
#endif

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

// Tensor cores: one mma.sync.aligned.m16n8k16 per warp, f32 accumulators c0..c3 updated in place (D = A·B + C).
// pack2 rounds two floats to one bf16 (or f16) pair, `lo` in the low half.
__device__ __forceinline__ unsigned pack2(__nv_bfloat16, float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<unsigned*>(&v);
}
__device__ __forceinline__ unsigned pack2(__half, float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<unsigned*>(&v);
}
// A and B packed: register i holds operand elements 2i (low half) and 2i+1, e.g. read as one 32-bit pair from
// shared memory of the operand type (kernel IR's mma from shared): `pair` loads elements i and i+1 (i even).
template <typename T>
__device__ __forceinline__ unsigned pair(const T* at) { return *reinterpret_cast<const unsigned*>(at); }
template <typename T>
__device__ __forceinline__ void mma_m16n8k16_pairs(float& c0, float& c1, float& c2, float& c3, unsigned a01, unsigned a23,
                                                   unsigned a45, unsigned a67, unsigned b01, unsigned b23) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
                 : "r"(a01), "r"(a23), "r"(a45), "r"(a67), "r"(b01), "r"(b23));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
                 : "r"(a01), "r"(a23), "r"(a45), "r"(a67), "r"(b01), "r"(b23));
  }
}

// The float operands are rounded to bf16 (or f16) pairs; element 2i goes in the low half of register i.
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float& c0, float& c1, float& c2, float& c3, float a0, float a1, float a2,
                                             float a3, float a4, float a5, float a6, float a7, float b0, float b1,
                                             float b2, float b3) {
  mma_m16n8k16_pairs<T>(c0, c1, c2, c3, pack2(T(), a0, a1), pack2(T(), a2, a3), pack2(T(), a4, a5), pack2(T(), a6, a7),
                        pack2(T(), b0, b1), pack2(T(), b2, b3));
}

// Vector global memory access (Kernel IR's loadVector / storeVector): W consecutive elements of T moved by one
// 4-, 8- or 16-byte instruction; p must be aligned to W * sizeof(T) bytes (the verifier proves the element index
// is a multiple of W; the runtime's arena aligns every buffer to 256 bytes). Values are f32 in registers.
template <int Bytes>
struct vec_word;
template <>
struct vec_word<4> { using type = unsigned; };
template <>
struct vec_word<8> { using type = uint2; };
template <>
struct vec_word<16> { using type = uint4; };

template <int W, typename T>
struct vec_traits {
  static_assert(W >= 2 && (W & (W - 1)) == 0, "vector width must be a power of two >= 2");
  static_assert(W * sizeof(T) >= 4 && W * sizeof(T) <= 16, "a vector access moves 4 to 16 bytes");
  using word = typename vec_word<static_cast<int>(W * sizeof(T))>::type;
};

// v0..v{W-1} = p[0..W) converted to f32.
template <int W, typename T, typename... F>
__device__ __forceinline__ void load_vec(const T* p, F&... v) {
  static_assert(sizeof...(F) == W && (std::is_same_v<F, float> && ...), "load_vec<W> fills W floats");
  using Word = typename vec_traits<W, T>::word;
  const Word word = *reinterpret_cast<const Word*>(p);
  const T* e = reinterpret_cast<const T*>(&word);
  int i = 0;
  ((v = to_f32(e[i++])), ...);
}

// Vector shared memory load (Kernel IR's loadSharedVector): v0..v{W-1} = p[0..W) of an f32 (W 2 or 4) or 16-bit (W 4
// or 8) shared buffer, widened to f32, by one 8- or 16-byte ld.shared, p aligned to W * sizeof(T) bytes (the verifier
// proves the index a multiple of W; buffers start 16-byte aligned).
template <int W, typename T, typename... F>
__device__ __forceinline__ void load_shared_vec(const T* p, F&... v) {
  static_assert(W * sizeof(T) == 8 || W * sizeof(T) == 16, "load_shared_vec<W> moves 8 or 16 bytes");
  load_vec<W>(p, v...);
}

// p[0..W) = v0..v{W-1} rounded to T.
template <int W, typename T, typename... F>
__device__ __forceinline__ void store_vec(T* p, F... v) {
  static_assert(sizeof...(F) == W && (std::is_same_v<F, float> && ...), "store_vec<W> takes W floats");
  using Word = typename vec_traits<W, T>::word;
  Word word;
  T* e = reinterpret_cast<T*>(&word);
  int i = 0;
  ((e[i++] = from_f32<T>(v)), ...);
  *reinterpret_cast<Word*>(p) = word;
}

// Asynchronous copies (Kernel IR's cpAsync / cpAsyncCommit / cpAsyncWait; sm_80+): Bytes (4, 8 or 16) from global
// to shared memory, both addresses aligned to Bytes; only the first `valid_bytes` are read, the rest of the
// destination is zero-filled. 16-byte copies bypass L1 (.cg), smaller ones cannot (.ca).
template <int Bytes>
__device__ __forceinline__ void cp_async(void* smem, const void* gmem, int valid_bytes = Bytes) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
  const unsigned dst = shared_address(smem);
  if constexpr (Bytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid_bytes) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(gmem), "n"(Bytes), "r"(valid_bytes) : "memory");
}
// Closes the thread's open group of copies.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most Pending of the thread's committed groups are still in flight.
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

// Warpgroup products (Kernel IR's wgmma; sm_90a). The product itself is emitted as inline PTX (its accumulators are
// one operand each); these are the pieces around it. On other architectures they trap: kiln's verifier never lets a
// kernel for such a target use them.
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KILN_HAS_WGMMA 1
#endif
// The 64-bit shared-memory matrix descriptor of an operand laid out as 8x8 core matrices of 128 contiguous bytes, no
// swizzle: start address, leading byte offset (between core matrices adjacent in k), stride byte offset (adjacent in
// m or n), each in units of 16 bytes. An MN-major B (imm-trans-b 1: n contiguous inside each core matrix) takes the same
// two strides in the same fields.
__device__ __forceinline__ unsigned long long wgmma_desc(const void* smem, unsigned k_stride_bytes, unsigned row_stride_bytes) {
  const unsigned addr = shared_address(smem);
  return static_cast<unsigned long long>((addr & 0x3FFFF) >> 4) |
         (static_cast<unsigned long long>((k_stride_bytes >> 4) & 0x3FFF) << 16) |
         (static_cast<unsigned long long>((row_stride_bytes >> 4) & 0x3FFF) << 32);
}
// The same for an operand in the 128-byte swizzle mode (rows of 128 bytes whose 16-byte chunks are permuted by the row
// within 8-row groups of 1024 bytes, the group's start 1024-byte aligned): the stride byte offset is the distance between
// 8-row groups. The leading byte offset: K-major, unused (16 bytes, 1 by convention); MN-major (imm-trans-b 1: rows of
// 64 n per k, 8 rows of k a group), the distance between blocks of 64 n.
__device__ __forceinline__ unsigned long long wgmma_desc_swizzle128(const void* smem, unsigned group_stride_bytes,
                                                                    unsigned leading_bytes = 16) {
  const unsigned addr = shared_address(smem);
  return static_cast<unsigned long long>((addr & 0x3FFFF) >> 4) | (static_cast<unsigned long long>((leading_bytes >> 4) & 0x3FFF) << 16) |
         (static_cast<unsigned long long>((group_stride_bytes >> 4) & 0x3FFF) << 32) | (1ull << 62);
}
__device__ __forceinline__ void wgmma_fence() {
#ifdef KILN_HAS_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void wgmma_commit_group() {
#ifdef KILN_HAS_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
template <int Pending>
__device__ __forceinline__ void wgmma_wait_group() {
#ifdef KILN_HAS_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
#else
  __trap();
#endif
}
// The thread's completed shared-memory writes (stores, landed cp.async copies) become visible to the async proxy
// that wgmma reads through.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
  __trap();
#endif
}

// mbarriers (Kernel IR's mbarrier statements; sm_80+): 64-bit barrier objects in shared memory counting arrivals in
// phases. Waits poll test_wait.parity on sm_80 (it has no blocking try_wait), try_wait.parity from sm_90.
__device__ __forceinline__ void mbarrier_init(unsigned long long* bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(arrivals) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(unsigned long long* bar) {
  asm volatile("{\n .reg .b64 state;\n mbarrier.arrive.shared.b64 state, [%0];\n}\n" ::"r"(shared_address(bar)) : "memory");
}
// The arrival happens when every cp.async this thread issued before it has landed (.noinc: it is one of the arrivals
// the barrier was initialised with).
__device__ __forceinline__ void cp_async_mbarrier_arrive(unsigned long long* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" ::"r"(shared_address(bar)) : "memory");
}
// On sm_90 a wait is try_wait, which suspends the thread in the barrier unit until the phase completes (or a time limit
// passes, then it asks again): a block of waiting warps does not flood the memory pipeline with polls, as test_wait would.
__device__ __forceinline__ void mbarrier_wait(unsigned long long* bar, int parity) {
  unsigned done = 0;
  do {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(shared_address(bar)), "r"(parity)
                 : "memory");
#else
    asm volatile("{\n .reg .pred p;\n mbarrier.test_wait.parity.shared.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(shared_address(bar)), "r"(parity)
                 : "memory");
#endif
  } while (!done);
}

// TMA (Kernel IR's tmaLoad; sm_90+). An arrival on `bar` that also makes its phase await `bytes` more bytes of copies.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)), "r"(bytes) : "memory");
#else
  __trap();
#endif
}
// The same done by one lane of the warp (every lane calls it; elect.sync picks the lane, a predicate rather than a branch):
// a producer warp's copies without a branch on the lane, so ptxas keeps the wgmmas of the loop it shares with the
// warpgroups unserialized.
__device__ __forceinline__ void mbarrier_arrive_expect_tx_elected(unsigned long long* bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("{\n .reg .pred p;\n elect.sync _|p, 0xffffffff;\n @p mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n}\n"
               ::"r"(shared_address(bar)), "r"(bytes) : "memory");
#else
  __trap();
#endif
}
// One box of `map` whose first element is (row, col) into shared memory at `dst`, its bytes completing on `bar`. The map
// is a __grid_constant__ kernel parameter: its generic address is what the instruction takes. Elected: done by one lane
// of the warp (see mbarrier_arrive_expect_tx_elected).
#define KILN_TMA_LOAD_2D "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
template <bool Elected = false>
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int col, int row, unsigned long long* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (Elected)
    asm volatile("{\n .reg .pred p;\n elect.sync _|p, 0xffffffff;\n @p " KILN_TMA_LOAD_2D "}\n"
                 ::"r"(shared_address(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(col), "r"(row),
                 "r"(shared_address(bar))
                 : "memory");
  else
    asm volatile(KILN_TMA_LOAD_2D ::"r"(shared_address(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(col), "r"(row),
                 "r"(shared_address(bar))
                 : "memory");
#else
  __trap();
#endif
}
#undef KILN_TMA_LOAD_2D

// The same box into every block of the cluster named in `blocks` (bit r: the block of rank r), at the same shared offset,
// its bytes completing on the same mbarrier of each (Kernel IR's tmaLoadMulticast); elected as above.
#define KILN_TMA_LOAD_2D_MULTICAST \
  "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n"
template <bool Elected = false>
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int col, int row, unsigned long long* bar,
                                            unsigned short blocks) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (Elected)
    asm volatile("{\n .reg .pred p;\n elect.sync _|p, 0xffffffff;\n @p " KILN_TMA_LOAD_2D_MULTICAST "}\n"
                 ::"r"(shared_address(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(col), "r"(row),
                 "r"(shared_address(bar)), "h"(blocks)
                 : "memory");
  else
    asm volatile(KILN_TMA_LOAD_2D_MULTICAST ::"r"(shared_address(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(col),
                 "r"(row), "r"(shared_address(bar)), "h"(blocks)
                 : "memory");
#else
  __trap();
#endif
}
#undef KILN_TMA_LOAD_2D_MULTICAST
// Programmatic dependent launch (Kernel::programmaticLaunch): the first statement of such a kernel. The calling
// thread waits until every grid this one depends on (those launched before it on the stream) has completed and its
// memory operations are visible; without a programmatic launch it returns at once.
__device__ __forceinline__ void wait_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#else
  __trap();
#endif
}
// The next grid on the stream may launch once every block of this one has said so (or exited); it still waits in
// wait_prior_grids for this one to complete before touching memory. kiln says so at the end of the body.
__device__ __forceinline__ void launch_dependent_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#else
  __trap();
#endif
}

// Kernel IR's blockTicket, by one thread between two block barriers: the count at *counter before this ticket (0 ..
// tickets - 1), counted modulo `tickets` (the last ticket sets it back to zero). acq_rel at gpu scope: the stores the
// block made before the first barrier are visible to whoever takes a later ticket, and the stores of those who took
// earlier tickets are visible to this block after the second barrier.
__device__ __forceinline__ unsigned long long ticket(unsigned long long* counter, unsigned long long tickets) {
  unsigned long long before;
  asm volatile("atom.acq_rel.gpu.global.add.u64 %0, [%1], 1;\n" : "=l"(before) : "l"(counter) : "memory");
  if (before + 1 == tickets) asm volatile("st.relaxed.gpu.global.u64 [%0], 0;\n" ::"l"(counter) : "memory");
  return before;
}
// Kernel IR's counterRelease and counterAwait, one thread each (after / before a barrier of the threads whose stores are
// handed over): a release add at gpu scope, and acquire loads at gpu scope until the count is there, then zero again.
__device__ __forceinline__ void counter_release(unsigned long long* counter) {
  asm volatile("red.release.gpu.global.add.u64 [%0], 1;\n" ::"l"(counter) : "memory");
}
__device__ __forceinline__ void counter_await(unsigned long long* counter, unsigned long long count) {
  unsigned long long now;
  do {
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];\n" : "=l"(now) : "l"(counter) : "memory");
  } while (now != count);
  asm volatile("st.relaxed.gpu.global.u64 [%0], 0;\n" ::"l"(counter) : "memory");
}
// Every thread of every block of the cluster (Kernel IR's clusterBarrier): what each did before is visible to all after.
__device__ __forceinline__ void cluster_barrier() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
// One arrival on the mbarrier at `bar`'s offset in each of the Blocks blocks of the cluster (Kernel IR's
// mbarrierArriveCluster): mapa gives its address in block r's shared memory.
template <int Blocks>
__device__ __forceinline__ void mbarrier_arrive_cluster(unsigned long long* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#pragma unroll
  for (int r = 0; r < Blocks; ++r)
    asm volatile("{\n .reg .b32 remote;\n mapa.shared::cluster.u32 remote, %0, %1;\n"
                 " mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(shared_address(bar)), "r"(r)
                 : "memory");
#else
  __trap();
#endif
}
// The thread's earlier mbarrier.init are visible to the cluster's other blocks (before a cluster barrier).
__device__ __forceinline__ void fence_mbarrier_init() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#else
  __trap();
#endif
}

// bar.sync Id, Threads: a barrier among the Threads threads (whole warps) of one warp role (Kernel IR's namedBarrier).
template <int Id, int Threads>
__device__ __forceinline__ void named_barrier() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(Id), "n"(Threads) : "memory");
}

// bar.sync id, Threads with the id in a register: the barrier of one group of a thread block that packs several of the
// kernel's blocks (Kernel IR's Kernel::groups; group g uses barrier 1 + g).
template <int Threads>
__device__ __forceinline__ void group_barrier(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(Threads) : "memory");
}

// ldmatrix (Kernel IR's ldmatrix; sm_75+): Count (1, 2, 4) 8x8 matrices of T (bf16 or f16) from shared memory, this
// lane's `row` being row (lane % 8) of matrix (lane / 8) (16-byte aligned; ignored for lanes >= 8 * Count). Each
// 32-bit result register holds two elements, the lower column in the low half; they arrive widened to f32, two
// floats per matrix in matrix order (v0, v1 from matrix 0, ...).
template <typename T>
__device__ __forceinline__ void unpack2(unsigned r, float& lo, float& hi) {
  const T* e = reinterpret_cast<const T*>(&r);
  lo = to_f32(e[0]);
  hi = to_f32(e[1]);
}
// The registers as loaded (Kernel IR's ldmatrix into pair registers): one per matrix, Count = how many are given,
// element pairs unconverted, as mma_m16n8k16_pairs takes them.
template <bool Trans, typename T, typename... R>
__device__ __forceinline__ void ldmatrix_pairs(const T* row, R&... out) {
  static_assert(sizeof(T) == 2, "ldmatrix loads 16-bit elements");
  constexpr int Count = sizeof...(R);
  static_assert((Count == 1 || Count == 2 || Count == 4) && (std::is_same_v<R, unsigned> && ...),
                "ldmatrix.x1/x2/x4 fills 1, 2 or 4 unsigned registers");
  const unsigned at = shared_address(row);
  unsigned r[4];
  if constexpr (Count == 1 && !Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(at) : "memory");
  else if constexpr (Count == 1)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(at) : "memory");
  else if constexpr (Count == 2 && !Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(at) : "memory");
  else if constexpr (Count == 2)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(at) : "memory");
  else if constexpr (Count == 4 && !Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at) : "memory");
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at) : "memory");
  unsigned* dst[] = {&out...};
  for (int j = 0; j < Count; ++j) *dst[j] = r[j];
}
template <int Count, bool Trans, typename T, typename... F>
__device__ __forceinline__ void ldmatrix(const T* row, F&... v) {
  static_assert(sizeof...(F) == 2 * Count && (std::is_same_v<F, float> && ...), "ldmatrix.x<Count> fills 2 * Count floats");
  unsigned r[4];
  if constexpr (Count == 1) ldmatrix_pairs<Trans>(row, r[0]);
  else if constexpr (Count == 2) ldmatrix_pairs<Trans>(row, r[0], r[1]);
  else ldmatrix_pairs<Trans>(row, r[0], r[1], r[2], r[3]);
  float* out[] = {&v...};
  for (int j = 0; j < Count; ++j) unpack2<T>(r[j], *out[2 * j], *out[2 * j + 1]);
}

// Rounds through a storage type (Cast).
template <typename T>
__device__ __forceinline__ float round_to(float v) { return to_f32(from_f32<T>(v)); }

}  // namespace kiln
