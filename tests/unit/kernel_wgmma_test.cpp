// Kernel IR's warpgroup products by hand: wgmma's operand layouts (core matrices) and accumulator layout in the
// interpreter, the asynchronous rules it checks (fence.proxy.async after the stores, no store into what a pending
// wgmma reads), the verifier's rules, the printed and emitted forms and nvcc for sm_90a.
#include <gtest/gtest.h>

#include "kernel_test_support.h"

namespace kiln::kernel {
namespace {

using namespace kernel_test;

constexpr int64_t kN = 24;                  // the product's n
constexpr int64_t kRowStride = 8 * 16;      // core matrices of a 16-deep operand: two per 8 rows
constexpr int64_t kAElems = 64 * 16, kBElems = kN * 16;

// kN / 2 accumulators c0.. zeroed, then (after the caller's wgmma) stored to y[64 x kN] from wgmma's layout:
// acc[4j + e] is D[16w + g + 8 (e / 2)][8j + 2t + e % 2] with w = tid / 32, g = (tid % 32) / 4, t = tid % 4.
std::vector<int> zeroAccumulators(Kernel& k) {
  std::vector<int> acc;
  for (int i = 0; i < kN / 2; ++i) {
    k.floatVars.push_back(fmt::format("c{}", i));
    acc.push_back(i);
    k.body.push_back(assign(i, fconst(0.f)));
  }
  return acc;
}
void storeAccumulators(Kernel& k, const Idx& tid) {
  Idx w = floorDiv(tid, 32), g = floorDiv(mod(tid, 32), 4), t = mod(tid, 4);
  for (int i = 0; i < kN / 2; ++i) {
    Idx row = w * idxConst(16) + g + idxConst(8 * (i % 4 / 2));
    Idx col = idxConst(8 * (i / 4) + i % 2) + t * idxConst(2);
    k.body.push_back(storeGlobal(1, row * idxConst(kN) + col, fvar(i)));
  }
}

// The product issued after wgmma.fence, committed and waited for; then y from the accumulators.
Program issueAndStore(Kernel k, Stmt product, const Idx& tid) {
  k.body.push_back(wgmmaFence());
  k.body.push_back(std::move(product));
  k.body.push_back(wgmmaCommit());
  k.body.push_back(wgmmaWait(0));
  storeAccumulators(k, tid);
  return program(kAElems + kBElems, 64 * kN, std::move(k));
}

enum class Fault { None, NoFence, StoreWhilePending, Divergent, NoWait };

// One warpgroup: x[0 .. 1024) is A (64 x 16, row-major), x[1024 ..) is B (kN x 16, [n][k]). Both are stored into bf16
// shared memory as core matrices (element (r, k) at (r / 8) * 128 + (k / 8) * 64 + (r % 8) * 8 + k % 8), fenced for the
// async proxy, published by a barrier and multiplied by one wgmma; y[64 x kN] = A·Bᵀ from the accumulators'
// layout (wgmmaElement).
Program warpgroupProduct(Fault fault = Fault::None, int64_t threads = 128) {
  Kernel k;
  k.name = "k_wgmma";
  k.block = {threads, 1, 1};
  k.shared = {SharedBuffer{"a", kAElems, DType::BF16}, SharedBuffer{"b", kBElems, DType::BF16}};
  const int kTid = 2, kE = 3;
  Idx tid = idxVar(kTid, "tid"), e = idxVar(kE, "e");
  auto coreMatrix = [](const Idx& flat) {  // row-major (r, k) of a 16-deep operand -> its core-matrix slot
    Idx r = floorDiv(flat, 16), kk = mod(flat, 16);
    return floorDiv(r, 8) * idxConst(kRowStride) + floorDiv(kk, 8) * idxConst(64) + mod(r, 8) * idxConst(8) + mod(kk, 8);
  };
  k.body.push_back(defIdx(kTid, "tid", threadIdx()));
  k.body.push_back(forLoop(kE, "e", tid, idxConst(kAElems), threads, {storeShared(0, coreMatrix(e), loadGlobal(0, e))}));
  k.body.push_back(forLoop(kE, "e", tid, idxConst(kBElems), threads,
                           {storeShared(1, coreMatrix(e), loadGlobal(0, e + idxConst(kAElems)))}));
  if (fault != Fault::NoFence) k.body.push_back(fenceProxyAsync());
  k.body.push_back(barrier());
  std::vector<int> acc = zeroAccumulators(k);
  const Stmt::CoreMatrices layout{64, kRowStride};
  k.body.push_back(wgmmaFence());
  Stmt product = wgmma(DType::BF16, 0, idxConst(0), layout, 1, idxConst(0), layout, kN, acc);
  if (fault == Fault::Divergent) k.body.push_back(ifLess(tid, idxConst(64), {product}));
  else k.body.push_back(product);
  k.body.push_back(wgmmaCommit());
  if (fault == Fault::StoreWhilePending) k.body.push_back(storeShared(1, tid, fconst(1.f)));
  if (fault != Fault::NoWait) k.body.push_back(wgmmaWait(0));
  if (fault == Fault::NoWait) k.body.push_back(storeShared(0, tid, fconst(1.f)));
  storeAccumulators(k, tid);
  return program(kAElems + kBElems, 64 * kN, std::move(k));
}

// p verifies, its interpreted y is A·Bᵀ of x's bf16-rounded A and B (f32 sums in k order), and nvcc compiles it.
void expectProduct(const Program& p, const HostTensor& x) {
  verify(p);
  auto out = interpret(p, {x});
  for (int r = 0; r < 64; ++r)
    for (int n = 0; n < kN; ++n) {
      float want = 0.f;
      for (int kk = 0; kk < 16; ++kk)
        want += loop::roundTo(DType::BF16, x.values[r * 16 + kk]) * loop::roundTo(DType::BF16, x.values[kAElems + n * 16 + kk]);
      ASSERT_FLOAT_EQ(out[0].values[r * kN + n], want) << "D[" << r << "][" << n << "]";
    }
  expectNvccCompiles(p);
}

TEST(KernelWgmma, CoreMatricesAndAccumulatorLayout) {
  Program p = warpgroupProduct();
  HostTensor x = ramp(kAElems + kBElems);
  expectProduct(p, x);
  EXPECT_EQ(wgmmaElement(0, 0), std::make_pair(0, 0));
  EXPECT_EQ(wgmmaElement(37, 6), std::make_pair(16 + 1 + 8, 8 + 2));  // warp 1, g 1, t 1; j 1, e 2
  std::string text = print(p);
  EXPECT_NE(text.find("  wgmma.m64n24k16.bf16 {%c0 .. %c11} += shared a[0] (core matrices k 64 row 128) x shared b[0] (core "
                      "matrices k 64 row 128)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  fence.proxy.async.shared\n  barrier\n"), std::string::npos) << text;
  std::string cu = cuda::emit(p).sources[0].text;
  EXPECT_NE(cu.find("wgmma.mma_async.sync.aligned.m64n24k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11}, "
                    "%13, %14, d, 1, 1, 0, 0;"), std::string::npos) << cu;
  EXPECT_NE(cu.find(": \"r\"(1), \"l\"(kiln::wgmma_desc(&a[0], 128, 256)), \"l\"(kiln::wgmma_desc(&b[0], 128, 256)));"),
            std::string::npos) << cu;
  EXPECT_NE(cu.find("kiln::wgmma_commit_group();\n  kiln::wgmma_wait_group<0>();\n"), std::string::npos) << cu;
}

// The 128-byte swizzle: A and B as 128-byte rows (64 elements) of dynamic shared memory whose 16-byte chunks are
// permuted by the row; the 16 columns multiplied start at column 16 of each row (a k-step inside the swizzled row).
Program swizzledProduct(int64_t aStart = 16) {
  Kernel k;
  k.name = "k_wgmma_swizzled";
  k.block = {128, 1, 1};
  k.shared = {SharedBuffer{"a", 64 * 64, DType::BF16, true}, SharedBuffer{"b", kN * 64, DType::BF16, true}};
  k.dynamicSharedBytes = k.dynamicBuffersBytes();
  const int kTid = 2, kE = 3;
  Idx tid = idxVar(kTid, "tid"), e = idxVar(kE, "e");
  auto swizzled = [](const Idx& flat) {  // row-major (r, k) of a 16-deep operand -> column 16 + k of swizzled row r
    Idx r = floorDiv(flat, 16), c = mod(flat, 16) + idxConst(16);
    return r * idxConst(64) + idxXor(floorDiv(c, 8), mod(r, 8)) * idxConst(8) + mod(c, 8);
  };
  k.body.push_back(defIdx(kTid, "tid", threadIdx()));
  k.body.push_back(forLoop(kE, "e", tid, idxConst(kAElems), 128, {storeShared(0, swizzled(e), loadGlobal(0, e))}));
  k.body.push_back(forLoop(kE, "e", tid, idxConst(kBElems), 128, {storeShared(1, swizzled(e), loadGlobal(0, e + idxConst(kAElems)))}));
  k.body.push_back(fenceProxyAsync());
  k.body.push_back(barrier());
  std::vector<int> acc = zeroAccumulators(k);
  const Stmt::CoreMatrices layout{0, 512, true};
  return issueAndStore(std::move(k), wgmma(DType::BF16, 0, idxConst(aStart), layout, 1, idxConst(16), layout, kN, acc), tid);
}

TEST(KernelWgmma, Swizzle128) {
  Program p = swizzledProduct();
  HostTensor x = ramp(kAElems + kBElems);
  expectProduct(p, x);
  std::string cu = cuda::emit(p).sources[0].text;
  EXPECT_NE(cu.find("\"l\"(kiln::wgmma_desc_swizzle128(&a[16], 1024)), \"l\"(kiln::wgmma_desc_swizzle128(&b[16], 1024))"),
            std::string::npos) << cu;
  // A start in the middle of an 8-row group, or one whose 16 columns would run past the row.
  std::string msg = errorOf([&] { interpret(swizzledProduct(64), {x}); });
  EXPECT_NE(msg.find("wgmma A starts at shared a[64], not in the first row of an 8-row group"), std::string::npos) << msg;
  msg = errorOf([&] { interpret(swizzledProduct(56), {x}); });
  EXPECT_NE(msg.find("wgmma A starts at shared a[56]"), std::string::npos) << msg;
  Program p2 = swizzledProduct();
  p2.kernels[0].shared[0].dynamic = false;
  msg = errorOf([&] { verify(p2); });
  EXPECT_NE(msg.find("wgmma A with the 128-byte swizzle reads shared a, which is not a 1024-byte aligned dynamic buffer"),
            std::string::npos) << msg;
}

// wgmma's register-A form with an MN-major B (attention's P·V: P's packed accumulators times v stored [key][width]):
// each thread loads its mma A fragment of x's A (64 x 16) into floats and packs them into 4 pair registers; B (kN x 16,
// [n][k] in x) goes to shared memory as MN-major core matrices, element (n, k) at (n / 8) * 128 + (k / 8) * 64 +
// (k % 8) * 8 + n % 8 (n contiguous inside each). y = A·Bᵀ as before. With `swizzled`, B in rows of 64 n per k under
// the 128-byte swizzle (as attention's v): (n, k) at logical k * 64 + n, chunk permuted by k mod 8 (k stride 512).
Program registerAProduct(bool swizzled = false) {
  Kernel k;
  k.name = "k_wgmma_regs";
  k.block = {128, 1, 1};
  k.shared = {swizzled ? SharedBuffer{"b", 16 * 64, DType::BF16, true} : SharedBuffer{"b", kBElems, DType::BF16}};
  k.dynamicSharedBytes = k.dynamicBuffersBytes();
  const int kTid = 2, kE = 3;
  Idx tid = idxVar(kTid, "tid"), e = idxVar(kE, "e");
  k.body.push_back(defIdx(kTid, "tid", threadIdx()));
  Idx n = floorDiv(e, 16), kk = mod(e, 16);
  Idx at = swizzled ? kk * idxConst(64) + idxXor(floorDiv(n, 8), mod(kk, 8)) * idxConst(8) + mod(n, 8)
                    : floorDiv(n, 8) * idxConst(128) + floorDiv(kk, 8) * idxConst(64) + mod(kk, 8) * idxConst(8) + mod(n, 8);
  k.body.push_back(forLoop(kE, "e", tid, idxConst(kBElems), 128, {storeShared(0, at, loadGlobal(0, e + idxConst(kAElems)))}));
  k.body.push_back(fenceProxyAsync());
  k.body.push_back(barrier());
  std::vector<int> acc = zeroAccumulators(k);
  Idx w = floorDiv(tid, 32), g = floorDiv(mod(tid, 32), 4), t = mod(tid, 4);
  std::vector<int> regs;
  for (int i = 0; i < 8; ++i) {  // mma's A fragment: element i at (g + 8 ((i / 2) % 2), 2t + i % 2 + 8 (i / 4)) of the warp's rows
    k.floatVars.push_back(fmt::format("fa{}", i));
    Idx row = w * idxConst(16) + g + idxConst(8 * ((i / 2) % 2)), col = t * idxConst(2) + idxConst(i % 2 + 8 * (i / 4));
    k.body.push_back(assign(static_cast<int>(k.floatVars.size()) - 1, loadGlobal(0, row * idxConst(16) + col)));
  }
  for (int r = 0; r < 4; ++r) {
    k.pairVars.push_back(fmt::format("ra{}", r));
    regs.push_back(r);
    const int lo = static_cast<int>(kN / 2) + 2 * r;
    k.body.push_back(packPair(DType::BF16, r, lo, lo + 1));
  }
  Stmt::CoreMatrices mn = swizzled ? Stmt::CoreMatrices{512, 1024, true, true} : Stmt::CoreMatrices{64, 128};
  mn.mnMajor = true;
  return issueAndStore(std::move(k), wgmmaRegA(DType::BF16, regs, 0, idxConst(0), mn, kN, acc), tid);
}

TEST(KernelWgmma, RegisterAAndMnMajorB) {
  Program p = registerAProduct();
  expectProduct(p, ramp(kAElems + kBElems));
  std::string text = print(p);
  EXPECT_NE(text.find("  wgmma.m64n24k16.bf16 {%c0 .. %c11} += registers $ra0 $ra1 $ra2 $ra3 x shared b[0] (mn-major core "
                      "matrices k 64 row 128)\n"), std::string::npos) << text;
  std::string cu = cuda::emit(p).sources[0].text;
  EXPECT_NE(cu.find("wgmma.mma_async.sync.aligned.m64n24k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11}, "
                    "{%13, %14, %15, %16}, %17, d, 1, 1, 1;"), std::string::npos) << cu;
  EXPECT_NE(cu.find(": \"r\"(1), \"r\"(ra0), \"r\"(ra1), \"r\"(ra2), \"r\"(ra3), \"l\"(kiln::wgmma_desc(&b[0], 128, 256)));"),
            std::string::npos) << cu;
  // The verifier: MN-major only for B; swizzled, 8 rows of 64 (k stride 512) in a 1024-byte aligned dynamic buffer; the
  // registers must exist.
  for (Stmt& st : p.kernels[0].body)
    if (st.kind == Stmt::Kind::Wgmma) st.as<op::Wgmma>().b.layout.swizzle128 = true;
  EXPECT_NE(errorOf([&] { verify(p); }).find("wgmma B MN-major with the 128-byte swizzle reads bf16 with k stride 64"), std::string::npos);
  p = registerAProduct();
  for (Stmt& st : p.kernels[0].body)
    if (st.kind == Stmt::Kind::Wgmma) std::get<op::PairRegs>(st.as<op::Wgmma>().a).regs[3] = 9;
  EXPECT_NE(errorOf([&] { verify(p); }).find("wgmma A from pair register 9 of 4"), std::string::npos);
  p = warpgroupProduct();
  for (Stmt& st : p.kernels[0].body)
    if (st.kind == Stmt::Kind::Wgmma) std::get<op::SharedMatrix>(st.as<op::Wgmma>().a).layout.mnMajor = true;
  EXPECT_NE(errorOf([&] { verify(p); }).find("wgmma A from shared a as MN-major core matrices (only B may be)"), std::string::npos);
  EXPECT_THROW(wgmmaRegA(DType::BF16, {0, 1, 2}, 0, idxConst(0), Stmt::CoreMatrices{64, 128}, 8, std::vector<int>(4, 0)), InternalError);
}

// The same product with B MN-major under the 128-byte swizzle (attention's v in rows of 64 columns): its descriptor's
// leading field between blocks of 64 n, its stride field between groups of 8 k; a start inside an 8-row group refused.
TEST(KernelWgmma, RegisterAAndSwizzledMnMajorB) {
  Program p = registerAProduct(true);
  expectProduct(p, ramp(kAElems + kBElems));
  EXPECT_NE(print(p).find("x shared b[0] (mn-major 128-byte-swizzled core matrices k 512 row 1024)"), std::string::npos) << print(p);
  std::string cu = cuda::emit(p).sources[0].text;
  EXPECT_NE(cu.find("\"l\"(kiln::wgmma_desc_swizzle128(&b[0], 1024, 2048))"), std::string::npos) << cu;
  for (Stmt& st : p.kernels[0].body)
    if (st.kind == Stmt::Kind::Wgmma) st.as<op::Wgmma>().b.start = idxConst(64);
  EXPECT_NE(errorOf([&] { verify(p); }).find("MN-major swizzled start shared b[64] not provably a multiple of 512"), std::string::npos);
  EXPECT_NE(errorOf([&] { interpret(p, {ramp(kAElems + kBElems)}); }).find("not at an 8-row group"), std::string::npos);
}

TEST(KernelWgmma, AsynchronousRules) {
  HostTensor x = ramp(kAElems + kBElems);
  std::string msg = errorOf([&] { interpret(warpgroupProduct(Fault::NoFence), {x}); });
  EXPECT_NE(msg.find("kernel k_wgmma: wgmma of warpgroup 0 reads shared a[0], written by thread 0 with no fence.proxy.async"),
            std::string::npos) << msg;
  msg = errorOf([&] { interpret(warpgroupProduct(Fault::StoreWhilePending), {x}); });
  EXPECT_NE(msg.find("kernel k_wgmma: thread 0 of block 0 writes shared b[0], which a wgmma that has not been waited for reads"),
            std::string::npos) << msg;
  msg = errorOf([&] { interpret(warpgroupProduct(Fault::NoWait), {x}); });
  EXPECT_NE(msg.find("writes shared a[0], which a wgmma that has not been waited for reads"), std::string::npos) << msg;
  msg = errorOf([&] { interpret(warpgroupProduct(Fault::Divergent), {x}); });
  EXPECT_NE(msg.find("kernel k_wgmma: wgmma reached by 64 of the 128 threads of warpgroup 0 (block 0)"), std::string::npos) << msg;
}

TEST(KernelWgmma, VerifierRules) {
  std::string msg = errorOf([&] { verify(warpgroupProduct(Fault::Divergent)); });
  EXPECT_NE(msg.find("wgmma under thread-dependent control flow `if (tid < 64)`"), std::string::npos) << msg;
  msg = errorOf([&] { verify(warpgroupProduct(Fault::None, 96)); });
  EXPECT_NE(msg.find("in a block of 96 threads (not whole warpgroups of 128)"), std::string::npos) << msg;
  Program p = warpgroupProduct();
  p.target = targetFor("sm_90");
  msg = errorOf([&] { verify(p); });
  EXPECT_NE(msg.find("wgmma on sm_90, which does not have it (sm_90a only)"), std::string::npos) << msg;
  p = warpgroupProduct();
  for (Stmt& st : p.kernels[0].body)
    if (st.kind == Stmt::Kind::Wgmma) st.as<op::Wgmma>().b.start = idxConst(16);  // B's last core matrices would lie past the buffer
  msg = errorOf([&] { verify(p); });
  EXPECT_NE(msg.find("wgmma operand shared b[399] indexes [399, 399], outside the buffer's 384 elements"),
            std::string::npos) << msg;
  p = warpgroupProduct();
  p.kernels[0].shared[0].dtype = DType::F16;
  msg = errorOf([&] { verify(p); });
  EXPECT_NE(msg.find("wgmma.bf16 reads A from shared a of type f16"), std::string::npos) << msg;
  EXPECT_THROW(wgmma(DType::BF16, 0, idxConst(0), {64, 128}, 1, idxConst(0), {64, 128}, 20, std::vector<int>(10, 0)),
               InternalError);
  EXPECT_THROW(wgmma(DType::F32, 0, idxConst(0), {64, 128}, 1, idxConst(0), {64, 128}, 8, std::vector<int>(4, 0)), InternalError);
}

}  // namespace
}  // namespace kiln::kernel
