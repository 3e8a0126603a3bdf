// Kernel IR's ldmatrix by hand: the PTX lane layout in the interpreter (alone and feeding mma), the verifier's
// rules and the emitted CUDA under nvcc.
#include <gtest/gtest.h>

#include "kernel_test_support.h"

namespace kiln::kernel {
namespace {

using namespace kernel_test;

// One warp copies x[0 .. 64*count) into bf16 shared `m` (count 8x8 matrices, row-major, one after another),
// loads them with ldmatrix.x{count} and stores every lane's elements back where the PTX layout says they came
// from, so y[0 .. 64*count) = x rounded to bf16. `shift` moves the rows (misaligned), `divergent` puts the
// ldmatrix under `if (tid < 16)`, `type` is m's element type.
Program roundTrip(int count, bool transpose, int64_t shift = 0, bool divergent = false, DType type = DType::BF16) {
  Kernel k;
  k.name = "k_ldmatrix";
  k.block = {32, 1, 1};
  k.shared = {SharedBuffer{"m", 64 * count, type}};
  const int kTid = 2, kE = 3;
  Idx tid = idxVar(kTid, "tid"), e = idxVar(kE, "e");
  k.body.push_back(defIdx(kTid, "tid", threadIdx()));
  k.body.push_back(forLoop(kE, "e", tid, idxConst(64 * count), 32, {storeShared(0, e, loadGlobal(0, e))}));
  k.body.push_back(barrier());
  std::vector<int> slots;
  for (int i = 0; i < 2 * count; ++i) {
    k.floatVars.push_back(fmt::format("v{}", i));
    slots.push_back(i);
  }
  Idx row = idxMul(mod(floorDiv(tid, 8), count), 64) + idxMul(mod(tid, 8), 8) + idxConst(shift);
  Stmt load = ldmatrix(0, row, count, transpose, slots);
  if (divergent) k.body.push_back(ifLess(tid, idxConst(16), {load}));
  else k.body.push_back(load);
  Idx g = floorDiv(tid, 4), t = mod(tid, 4);
  for (int j = 0; j < count; ++j)
    for (int h = 0; h < 2; ++h) {
      Idx col = idxMul(t, 2) + idxConst(h);
      Idx at = transpose ? idxMul(col, 8) + g : idxMul(g, 8) + col;
      k.body.push_back(storeGlobal(1, at + idxConst(64 * j), fvar(2 * j + h)));
    }
  return program(256, 256, std::move(k));
}

TEST(KernelWarp, LdmatrixLaneLayout) {
  HostTensor x = ramp(256);
  for (int count : {1, 2, 4})
    for (bool transpose : {false, true}) {
      Program p = roundTrip(count, transpose);
      verify(p);
      auto out = interpret(p, {x});
      for (int i = 0; i < 64 * count; ++i)
        ASSERT_EQ(out[0].values[i], loop::roundTo(DType::BF16, x.values[i])) << "x" << count << (transpose ? ".trans" : "") << " " << i;
      expectNvccCompiles(p);
    }
  std::string text = print(roundTrip(4, true));
  EXPECT_NE(text.find("  %v0, %v1, %v2, %v3, %v4, %v5, %v6, %v7 = ldmatrix.x4.trans shared m[((tid floordiv 8) mod 4)*64 + (tid mod 8)*8]\n"),
            std::string::npos) << text;
  std::string cu = cuda::emit(roundTrip(2, false)).sources[0].text;
  EXPECT_NE(cu.find("  kiln::ldmatrix<2, false>(&m[((tid / 8) % 2)*64 + (tid % 8)*8], v0, v1, v2, v3);\n"), std::string::npos) << cu;
}

TEST(KernelWarp, LdmatrixFaults) {
  std::string msg = errorOf([&] { interpret(roundTrip(4, false, /*shift=*/2), {ramp(256)}); });
  EXPECT_NE(msg.find("kernel k_ldmatrix: lane 0 of warp 0 supplies ldmatrix row shared m[2] (must be a multiple of 8"),
            std::string::npos) << msg;
  msg = errorOf([&] { verify(roundTrip(4, false, 2)); });
  EXPECT_NE(msg.find("kernel k_ldmatrix: ldmatrix row not provably aligned: shared m["), std::string::npos) << msg;
  msg = errorOf([&] { verify(roundTrip(4, false, 8)); });
  EXPECT_NE(msg.find("ldmatrix row shared m["), std::string::npos) << msg;
  EXPECT_NE(msg.find("outside the buffer's 256 elements"), std::string::npos) << msg;
  msg = errorOf([&] { verify(roundTrip(2, false, 0, /*divergent=*/true)); });
  EXPECT_NE(msg.find("ldmatrix under thread-dependent control flow `if (tid < 16)`"), std::string::npos) << msg;
  msg = errorOf([&] { interpret(roundTrip(2, false, 0, true), {ramp(256)}); });
  EXPECT_NE(msg.find("kernel k_ldmatrix: ldmatrix reached by 16 of 32 lanes of warp 0 (block 0)"), std::string::npos) << msg;
  msg = errorOf([&] { verify(roundTrip(2, false, 0, false, DType::F32)); });
  EXPECT_NE(msg.find("ldmatrix from shared m of type f32 (want bf16 or f16)"), std::string::npos) << msg;
  EXPECT_THROW(ldmatrix(0, idxConst(0), 3, false, {0, 1, 2, 3, 4, 5}), InternalError);
  EXPECT_THROW(ldmatrix(0, idxConst(0), 2, false, {0, 1}), InternalError);
}

// ldmatrix.x4 fills mma's A fragment from a row-major 16x16 tile and ldmatrix.x2 its B fragment from B stored as
// [n][k]; y = A·Bᵀ (16 x 8). x[0..256) is A, x[256..384) is B.
// The product of LdmatrixFeedsMma, A and B loaded into floats (pairs = false) or kept packed in pair registers.
Program ldmatrixMma(bool pairs) {
  Kernel k;
  k.name = "k_ldmatrix_mma";
  k.block = {32, 1, 1};
  k.shared = {SharedBuffer{"a", 256, DType::BF16}, SharedBuffer{"b", 128, DType::BF16}};
  const int kTid = 2, kE = 3;
  Idx tid = idxVar(kTid, "tid"), e = idxVar(kE, "e");
  k.body.push_back(defIdx(kTid, "tid", threadIdx()));
  k.body.push_back(forLoop(kE, "e", tid, idxConst(256), 32, {storeShared(0, e, loadGlobal(0, e))}));
  k.body.push_back(forLoop(kE, "e", tid, idxConst(128), 32, {storeShared(1, e, loadGlobal(0, e + idxConst(256)))}));
  k.body.push_back(barrier());
  if (!pairs) {
    for (int i = 0; i < 8; ++i) k.floatVars.push_back(fmt::format("a{}", i));
    for (int i = 0; i < 4; ++i) k.floatVars.push_back(fmt::format("b{}", i));
  }
  for (int i = 0; i < 4; ++i) k.floatVars.push_back(fmt::format("c{}", i));
  const int c0 = pairs ? 0 : 12;  // the accumulators' slots
  // Matrix j of A is rows 8 (j % 2), columns 8 (j / 2); matrix j of B is columns 8j of all 8 rows of [n][k].
  Idx aRow = idxMul(mod(tid, 8) + idxMul(mod(floorDiv(tid, 8), 2), 8), 16) + idxMul(floorDiv(tid, 16), 8);
  Idx bRow = idxMul(mod(tid, 8), 16) + idxMul(mod(floorDiv(tid, 8), 2), 8);
  if (pairs) {
    for (int i = 0; i < 6; ++i) k.pairVars.push_back(fmt::format("r{}", i));
    k.body.push_back(ldmatrixPairs(0, aRow, false, {0, 1, 2, 3}));
    k.body.push_back(ldmatrixPairs(1, bRow, false, {4, 5}));
  } else {
    k.body.push_back(ldmatrix(0, aRow, 4, false, {0, 1, 2, 3, 4, 5, 6, 7}));
    k.body.push_back(ldmatrix(1, bRow, 2, false, {8, 9, 10, 11}));
  }
  for (int i = c0; i < c0 + 4; ++i) k.body.push_back(assign(i, fconst(0.f)));
  if (pairs) k.body.push_back(mmaFromPairs(DType::BF16, {0, 1, 2, 3}, {4, 5}, {c0, c0 + 1, c0 + 2, c0 + 3}));
  else k.body.push_back(mma(DType::BF16, {0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11}, {c0, c0 + 1, c0 + 2, c0 + 3}));
  Idx g = floorDiv(tid, 4), t = mod(tid, 4);
  for (int i = 0; i < 4; ++i)  // c_i is D[g + 8 (i / 2)][2t + i % 2]
    k.body.push_back(storeGlobal(1, idxMul(g + idxConst(8 * (i / 2)), 8) + idxMul(t, 2) + idxConst(i % 2), fvar(c0 + i)));
  return program(384, 128, std::move(k));
}

TEST(KernelWarp, LdmatrixFeedsMma) {
  for (bool pairs : {false, true}) {
  Program p = ldmatrixMma(pairs);
  SCOPED_TRACE(pairs ? "pair registers" : "float slots");
  verify(p);
  HostTensor x = ramp(384);
  auto out = interpret(p, {x});
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      float want = 0.f;
      for (int kk = 0; kk < 16; ++kk)
        want += loop::roundTo(DType::BF16, x.values[r * 16 + kk]) * loop::roundTo(DType::BF16, x.values[256 + n * 16 + kk]);
      EXPECT_FLOAT_EQ(out[0].values[r * 8 + n], want) << "D[" << r << "][" << n << "]";
    }
  expectNvccCompiles(p);
  }
}

// An mma may not read a pair register that no ldmatrix loaded, nor a register the kernel does not declare.
TEST(KernelWarp, MmaFromPairsNeedsLoadedRegisters) {
  Program p = ldmatrixMma(true);
  Block& body = p.kernels[0].body;
  auto firstLdmatrix = std::find_if(body.begin(), body.end(), [](const Stmt& s) { return s.kind == Stmt::Kind::Ldmatrix; });
  body.erase(firstLdmatrix);  // A's registers are never loaded
  EXPECT_THROW(verify(p), InternalError);
  Program q = ldmatrixMma(true);
  q.kernels[0].pairVars.pop_back();  // b23 undeclared
  EXPECT_THROW(verify(q), InternalError);
}

}  // namespace
}  // namespace kiln::kernel
