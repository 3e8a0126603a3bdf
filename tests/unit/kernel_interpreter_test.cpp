// Kernel IR by hand: the lockstep interpreter, the verifier's hardware rules and the printer.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>

#include "kiln/cuda/emitter.h"
#include "kiln/kernel/ir.h"
#include "kiln/loop/ir.h"
#include "kiln/support/error.h"
#include "kernel_test_support.h"

namespace kiln::kernel {
namespace {

using namespace kernel_test;


// y[p] = x[p]*2 + 1, one thread per element; `guard` keeps the 24 surplus threads from storing.
Program elementwise(bool guard) {
  Kernel k;
  k.name = "k0";
  k.grid = {4, 1, 1};
  k.block = {256, 1, 1};
  k.origins = {"aten::mul", "aten::add"};
  Idx p = idxVar(2, "p");
  Stmt store = storeGlobal(1, p, fapply(Fn::Add, {fapply(Fn::Mul, {loadGlobal(0, p), fconst(2.f)}), fconst(1.f)}));
  k.body.push_back(defIdx(2, "p", blockIdx() * idxConst(256) + threadIdx()));
  if (guard) k.body.push_back(ifLess(p, idxConst(1000), {store}));
  else k.body.push_back(store);
  return program(1000, 1000, std::move(k));
}

// One block of 128 threads sums x[0..n): strided per-thread partial sums, then a tree in shared memory.
// `written` limits which threads store their partial sum (128 = all, the correct kernel).
Program blockReduce(int64_t n, int64_t written = 128) {
  Kernel k;
  k.name = "k_sum";
  k.block = {128, 1, 1};
  k.floatVars = {"acc"};
  k.shared = {SharedBuffer{"red", 128}};
  Idx tid = idxVar(2, "tid"), i = idxVar(3, "i");
  FE acc = fvar(0);
  k.body.push_back(defIdx(2, "tid", threadIdx()));
  k.body.push_back(assign(0, fconst(0.f)));
  k.body.push_back(forLoop(3, "i", tid, idxConst(n), 128, {assign(0, fapply(Fn::Add, {acc, loadGlobal(0, i)}))}));
  Stmt partial = storeShared(0, tid, acc);
  if (written < 128) k.body.push_back(ifLess(tid, idxConst(written), {partial}));
  else k.body.push_back(partial);
  k.body.push_back(barrier());
  for (int64_t s = 64; s >= 1; s /= 2) {
    k.body.push_back(ifLess(tid, idxConst(s), {storeShared(0, tid, fapply(Fn::Add, {loadShared(0, tid),
                                                                                     loadShared(0, idxAdd(tid, s))}))}));
    k.body.push_back(barrier());
  }
  k.body.push_back(ifLess(tid, idxConst(1), {storeGlobal(1, idxConst(0), loadShared(0, idxConst(0)))}));
  return program(n, 1, std::move(k));
}

// One warp: A (16 x 16, x[0..256)) and B (8 x 16 as [n][k], x[256..384)) copied into bf16 shared memory
// ([row][k], `stride` elements per row), then one mma reading its registers as pairs from there, y = A·Bᵀ
// (16 x 8). `shift` moves every pair index (1: misaligned pairs); `sharedType` is the slices' element type;
// `aElements` (0: 16 x stride) the size of A's slice.
Program mmaFromSharedPairs(int64_t shift = 0, DType sharedType = DType::BF16, int64_t stride = 24, int64_t aElements = 0) {
  Kernel k;
  k.name = "k_mma";
  k.block = {32, 1, 1};
  k.floatVars = {"c0", "c1", "c2", "c3"};
  k.shared = {SharedBuffer{"a", aElements ? aElements : 16 * stride, sharedType}, SharedBuffer{"b", 8 * stride, sharedType}};
  const int kTid = 2, kG = 3, kT = 4, kE = 5, kR = 6;
  Idx tid = idxVar(kTid, "tid"), g = idxVar(kG, "g"), t = idxVar(kT, "t"), e = idxVar(kE, "e");
  k.body.push_back(defIdx(kTid, "tid", threadIdx()));
  k.body.push_back(defIdx(kG, "g", floorDiv(tid, 4)));
  k.body.push_back(defIdx(kT, "t", mod(tid, 4)));
  // Copy A and B: element e of A is row e / 16, k e % 16; element e of B is n e / 16, k e % 16.
  Block copyA, copyB;
  copyA.push_back(defIdx(kR, "r", floorDiv(e, 16)));
  const int64_t copyStride = aElements ? aElements / 16 : stride;  // a short A slice is filled densely
  copyA.push_back(storeShared(0, idxVar(kR, "r") * idxConst(copyStride) + mod(e, 16), loadGlobal(0, e)));
  copyB.push_back(defIdx(kR, "r", floorDiv(e, 16)));
  copyB.push_back(storeShared(1, idxVar(kR, "r") * idxConst(stride) + mod(e, 16), loadGlobal(0, e + idxConst(256))));
  k.body.push_back(forLoop(kE, "e", tid, idxConst(256), 32, std::move(copyA)));
  k.body.push_back(forLoop(kE, "e", tid, idxConst(128), 32, std::move(copyB)));
  k.body.push_back(barrier());
  for (int i = 0; i < 4; ++i) k.body.push_back(assign(i, fconst(0.f)));
  auto at = [&](Idx row, int64_t kOffset) { return row * idxConst(stride) + t * idxConst(2) + idxConst(kOffset + shift); };
  Idx g8 = g + idxConst(8);
  k.body.push_back(mmaFromShared(DType::BF16, 0, {at(g, 0), at(g8, 0), at(g, 8), at(g8, 8)}, 1, {at(g, 0), at(g, 8)}, {0, 1, 2, 3}));
  for (int i = 0; i < 4; ++i)  // c_i is D[g + 8 (i / 2)][2t + i % 2]
    k.body.push_back(storeGlobal(1, (g + idxConst(8 * (i / 2))) * idxConst(8) + t * idxConst(2) + idxConst(i % 2), fvar(i)));
  return program(384, 128, std::move(k));
}

TEST(KernelInterpreter, MmaReadsBf16PairsFromSharedMemory) {
  HostTensor x = ramp(384);
  auto out = interpret(mmaFromSharedPairs(), {x});
  ASSERT_EQ(out[0].values.size(), 128u);
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      float want = 0.f;  // bf16 operands (rounded when stored to shared memory), f32 accumulation in k order
      for (int kk = 0; kk < 16; ++kk)
        want += loop::roundTo(DType::BF16, x.values[r * 16 + kk]) * loop::roundTo(DType::BF16, x.values[256 + n * 16 + kk]);
      EXPECT_FLOAT_EQ(out[0].values[r * 8 + n], want) << "D[" << r << "][" << n << "]";
    }
  verify(mmaFromSharedPairs());
}

TEST(KernelInterpreter, MmaPairsMustBeAlignedAndOfTheOperandType) {
  std::string msg = errorOf([&] { interpret(mmaFromSharedPairs(/*shift=*/1), {ramp(384)}); });
  EXPECT_NE(msg.find("kernel k_mma: lane 0 of warp 0 reads an mma pair at shared a[1] (must be even"), std::string::npos) << msg;
  msg = errorOf([&] { verify(mmaFromSharedPairs(/*shift=*/1)); });
  EXPECT_NE(msg.find("is not provably even"), std::string::npos) << msg;
  msg = errorOf([&] { verify(mmaFromSharedPairs(0, DType::F32)); });
  EXPECT_NE(msg.find("mma.bf16 reads pairs from shared a of type f32"), std::string::npos) << msg;
  // Pairs read at 24 elements per row from an A slice of 256: the verifier bounds every pair.
  msg = errorOf([&] { verify(mmaFromSharedPairs(0, DType::BF16, 24, /*aElements=*/256)); });
  EXPECT_NE(msg.find("mma pair shared a["), std::string::npos) << msg;
  EXPECT_NE(msg.find("outside the buffer's 256 elements"), std::string::npos) << msg;
}

TEST(KernelInterpreter, ElementwiseOneThreadPerElement) {
  Program p = elementwise(true);
  verify(p);
  HostTensor x = ramp(1000);
  auto out = interpret(p, {x});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape, Shape{1000});
  ASSERT_EQ(out[0].values.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(out[0].values[i], x.values[i] * 2.f + 1.f) << "at " << i;
}

TEST(KernelInterpreter, BlockReductionWithBarriers) {
  Program p = blockReduce(1000);
  HostTensor x = ramp(1000);
  auto out = interpret(p, {x});
  double ref = std::accumulate(x.values.begin(), x.values.end(), 0.0);
  ASSERT_EQ(out[0].values.size(), 1u);
  EXPECT_NEAR(out[0].values[0], ref, 1e-4 * std::abs(ref));
}

TEST(KernelInterpreter, ReadOfUnwrittenSharedElementThrows) {
  Program p = blockReduce(1000, 100);  // threads 100..127 never store their partial sum
  std::string msg = errorOf([&] { interpret(p, {ramp(1000)}); });
  EXPECT_NE(msg.find("kernel k_sum: thread 36 reads shared red[100] that no thread wrote"), std::string::npos) << msg;
}

TEST(KernelInterpreter, DivergentBarrierIsRejected) {
  Program p = blockReduce(1000);
  Kernel& k = p.kernels[0];
  k.body.push_back(ifLess(threadIdx(), idxConst(64), {barrier()}));
  std::string v = errorOf([&] { verify(p); });
  EXPECT_NE(v.find("barrier under thread-dependent control flow"), std::string::npos) << v;
  std::string r = errorOf([&] { interpret(p, {ramp(1000)}); });
  EXPECT_NE(r.find("kernel k_sum: barrier reached by 64 of 128 threads"), std::string::npos) << r;
}

TEST(KernelInterpreter, BarrierUnderUniformControlFlowIsAccepted) {
  Program p = blockReduce(1000);
  Kernel& k = p.kernels[0];
  // blockIdx is uniform across the block, and so is a loop with constant bounds.
  k.body.push_back(ifLess(blockIdx(), idxConst(1), {forLoop(4, "j", idxConst(0), idxConst(3), 1, {barrier()})}));
  EXPECT_NO_THROW(verify(p));
  EXPECT_NO_THROW(interpret(p, {ramp(1000)}));
  // ... but a loop whose bound derives from threadIdx is not.
  k.body.push_back(defIdx(5, "q", idxAdd(threadIdx(), 1)));
  k.body.push_back(forLoop(6, "j2", idxConst(0), idxVar(5, "q"), 1, {barrier()}));
  EXPECT_NE(errorOf([&] { verify(p); }).find("barrier under thread-dependent"), std::string::npos);
}

TEST(KernelVerifier, AcceptsBlockReduction) {
  EXPECT_NO_THROW(verify(blockReduce(1000)));
  EXPECT_NO_THROW(verify(elementwise(true)));
}

TEST(KernelInterpreter, OutOfBoundsGlobalStoreThrows) {
  Program p = elementwise(false);
  std::string msg = errorOf([&] { interpret(p, {ramp(1000)}); });
  EXPECT_NE(msg.find("kernel k0: thread 232 of block 3 stores y[1000] out of bounds"), std::string::npos) << msg;
}

TEST(KernelVerifier, RejectsHardwareRuleViolations) {
  {
    Program p = blockReduce(1000);
    p.kernels[0].body.push_back(storeShared(0, idxAdd(threadIdx(), 1), fconst(0.f)));  // red[128]
    EXPECT_NE(errorOf([&] { verify(p); }).find("indexes [1, 128], outside the buffer's 128 elements"), std::string::npos);
  }
  {
    Program p = blockReduce(1000);
    p.kernels[0].shared.push_back(SharedBuffer{"big", 12 * 1024});
    EXPECT_NE(errorOf([&] { verify(p); }).find("static shared memory"), std::string::npos);
  }
  {
    Program p = blockReduce(1000);
    p.kernels[0].block = {2048, 1, 1};
    EXPECT_NE(errorOf([&] { verify(p); }).find("block dimension 0 is 2048"), std::string::npos);
  }
  {
    Program p = elementwise(true);
    p.kernels[0].grid = {0, 1, 1};
    EXPECT_NE(errorOf([&] { verify(p); }).find("grid dimension 0 is 0"), std::string::npos);
  }
  {
    Program p = elementwise(true);
    p.kernels[0].body.insert(p.kernels[0].body.begin(), storeGlobal(1, idxVar(2, "p"), fconst(0.f)));  // p before def
    EXPECT_NE(errorOf([&] { verify(p); }).find("before its definition"), std::string::npos);
  }
  {
    Program p = blockReduce(1000);
    p.kernels[0].body.erase(p.kernels[0].body.begin() + 1);  // drop `%acc = 0`
    EXPECT_NE(errorOf([&] { verify(p); }).find("%acc read before any assignment"), std::string::npos);
  }
  {
    Program p = elementwise(true);
    p.kernels[0].params[1].buffer = 7;
    EXPECT_NE(errorOf([&] { verify(p); }).find("names buffer #7"), std::string::npos);
  }
}

TEST(KernelPrinter, PrintsStatementsAndJson) {
  Program p = blockReduce(1000);
  std::string text = print(p);
  EXPECT_NE(text.find("// kiln kernel IR: handwritten"), std::string::npos) << text;
  EXPECT_NE(text.find("kernel k_sum grid(1,1,1) block(128,1,1) shared 512 bytes"), std::string::npos) << text;
  EXPECT_NE(text.find("  params: in x: f32[1000], out y: f32[1] (written)"), std::string::npos) << text;
  EXPECT_NE(text.find("  for i in tid..1000 step 128 {\n    %acc = add(%acc, load x[i])\n  }"), std::string::npos) << text;
  EXPECT_NE(text.find("  if (tid < 64) {\n    store shared red[tid] = add(load shared red[tid], load shared red[tid + 64])\n  }\n  barrier"),
            std::string::npos)
      << text;
  EXPECT_EQ(text, print(blockReduce(1000)));
  nlohmann::json j = toJson(p);
  ASSERT_EQ(j["kernels"].size(), 1u);
  EXPECT_EQ(j["kernels"][0]["name"], "k_sum");
  EXPECT_EQ(j["kernels"][0]["shared_bytes"], 512);
  EXPECT_EQ(j["kernels"][0]["block"][0], 128);
  EXPECT_FALSE(j["kernels"][0]["body"].empty());
}

// y = x*2 + 1 on n elements of `dtype`, `width` at a time: one thread per vector, vector loads into float slots
// v0.., vector stores of the results. `shift` moves the load index (misaligned), `guard` off lets the surplus
// threads of the last block run past the end.
Program vectorProgram(DType dtype, int width, int64_t n = 512, int64_t shift = 0, bool guard = true) {
  Program p;
  p.modelName = "handwritten";
  loop::Buffer x = buffer(loop::Buffer::Kind::Input, "x", n), y = buffer(loop::Buffer::Kind::Output, "y", n);
  x.dtype = y.dtype = dtype;
  p.buffers = {x, y};
  p.inputs = {kX};
  p.outputs = {kY};
  Kernel k;
  k.name = "k_vec";
  k.params = {Param{kX, "x", dtype, n, false}, Param{kY, "y", dtype, n, true}};
  k.block = {64, 1, 1};
  k.grid = {(n / width + 63) / 64, 1, 1};
  std::vector<int> slots;
  std::vector<FE> results;
  for (int i = 0; i < width; ++i) {
    k.floatVars.push_back(fmt::format("v{}", i));
    slots.push_back(i);
    results.push_back(fapply(Fn::Add, {fapply(Fn::Mul, {fvar(i), fconst(2.f)}), fconst(1.f)}));
  }
  Idx v = idxVar(2, "p");
  k.body.push_back(defIdx(2, "p", blockIdx() * idxConst(64) + threadIdx()));
  Block body = {loadVector(0, idxMul(v, width) + idxConst(shift), slots), storeVector(1, idxMul(v, width), results)};
  if (guard) k.body.push_back(ifLess(v, idxConst(n / width), std::move(body)));
  else k.body.insert(k.body.end(), body.begin(), body.end());
  p.kernels.push_back(std::move(k));
  return p;
}

TEST(KernelInterpreter, VectorLoadsAndStores) {
  for (auto [dtype, width] : {std::pair{DType::F32, 4}, {DType::F32, 2}, {DType::BF16, 8}, {DType::F16, 4}, {DType::BF16, 2}}) {
    Program p = vectorProgram(dtype, width);
    verify(p);
    HostTensor x = ramp(512);
    x.dtype = dtype;
    auto out = interpret(p, {x});
    ASSERT_EQ(out[0].values.size(), 512u);
    for (int i = 0; i < 512; ++i) {
      float want = loop::roundTo(dtype, loop::roundTo(dtype, x.values[i]) * 2.f + 1.f);
      ASSERT_EQ(out[0].values[i], want) << dtypeName(dtype) << " x" << width << " at " << i;
    }
    expectNvccCompiles(p);
  }
  std::string cu = cuda::emit(vectorProgram(DType::BF16, 8)).sources[0].text;
  EXPECT_NE(cu.find("kiln::load_vec<8>(in0 + (p*8), v0, v1, v2, v3, v4, v5, v6, v7);"), std::string::npos) << cu;
  EXPECT_NE(cu.find("kiln::store_vec<8>(out + (p*8), kiln::add(kiln::mul(v0, 2.0f), 1.0f), "), std::string::npos) << cu;
  std::string text = print(vectorProgram(DType::F32, 4));
  EXPECT_NE(text.find("    %v0, %v1, %v2, %v3 = load4 x[p*4]\n"
                      "    store4 y[p*4] = (add(mul(%v0, 2), 1), add(mul(%v1, 2), 1), add(mul(%v2, 2), 1), add(mul(%v3, 2), 1))"),
            std::string::npos)
      << text;
}

TEST(KernelInterpreter, VectorAccessFaults) {
  // Misaligned: the index is not a multiple of the width.
  std::string msg = errorOf([&] { interpret(vectorProgram(DType::F32, 4, 512, /*shift=*/2), {ramp(512)}); });
  EXPECT_NE(msg.find("kernel k_vec: thread 0 of block 0 loads vector4 x[2]: misaligned vector access"), std::string::npos) << msg;
  msg = errorOf([&] { verify(vectorProgram(DType::F32, 4, 512, 2)); });
  EXPECT_NE(msg.find("kernel k_vec: vector access not provably aligned: load4 x[p*4 + 2]"), std::string::npos) << msg;
  // A multiple of 8 is a multiple of 4: shifted by a whole vector it is aligned (but runs off the end).
  msg = errorOf([&] { verify(vectorProgram(DType::F32, 4, 512, 4)); });
  EXPECT_NE(msg.find("load4 x[p*4 + 4] reaches elements [4, 515], outside the parameter's 512 elements"), std::string::npos) << msg;
  msg = errorOf([&] { interpret(vectorProgram(DType::F32, 4, 512, 4), {ramp(512)}); });
  EXPECT_NE(msg.find("kernel k_vec: thread 63 of block 1 loads vector4 x[512..515] out of bounds (512 elements"), std::string::npos)
      << msg;
  // Unguarded: 64 threads of 4 elements for 200 elements.
  msg = errorOf([&] { verify(vectorProgram(DType::F32, 4, 200, 0, /*guard=*/false)); });
  EXPECT_NE(msg.find("outside the parameter's 200 elements"), std::string::npos) << msg;
  msg = errorOf([&] { interpret(vectorProgram(DType::F32, 4, 200, 0, false), {ramp(200)}); });
  EXPECT_NE(msg.find("thread 50 of block 0 loads vector4 x[200..203] out of bounds"), std::string::npos) << msg;
  // 32 bytes is wider than any vector instruction.
  msg = errorOf([&] { verify(vectorProgram(DType::F32, 8)); });
  EXPECT_NE(msg.find("load8 of f32 x: vectors are 2, 4 or 8 elements of f32, bf16 or f16 in 4 to 16 bytes"), std::string::npos)
      << msg;
  EXPECT_THROW(loadVector(0, idxConst(0), {0, 1, 2}), InternalError);
}

// A vector access whose index goes through a definition that interval arithmetic bounds too loosely: the verifier tries
// each value of the definition's variables (block b of 8 stores row qb = 7 - pb + (pb div 4)(2 pb - 11), a permutation
// of 0..7 that intervals bound by [-11, 10]); a definition that does reach outside still fails.
TEST(KernelInterpreter, VectorAccessBoundsEnumerateSmallDefinitions) {
  auto program = [](int64_t rowOffset) {
    Program p = vectorProgram(DType::F32, 4, 64);
    Kernel& k = p.kernels[0];
    k.grid = {1, 1, 1};
    k.block = {8, 1, 1};
    Idx pb = idxVar(3, "pb"), qb = idxVar(4, "qb");
    k.body = {defIdx(3, "pb", threadIdx()),
              defIdx(4, "qb", idxAdd(idxMul(pb, -1), 7 + rowOffset) + floorDiv(pb, 4) * idxAdd(idxMul(pb, 2), -11)),
              loadVector(0, idxMul(qb, 8), {0, 1, 2, 3}), storeVector(1, idxMul(qb, 8), {fvar(0), fvar(1), fvar(2), fvar(3)})};
    return p;
  };
  Program p = program(0);
  verify(p);
  auto out = interpret(p, {ramp(64)});
  for (int64_t row = 0; row < 8; ++row) EXPECT_EQ(out[0].values[static_cast<size_t>(row * 8)], ramp(64).values[static_cast<size_t>(row * 8)]);
  EXPECT_NE(errorOf([&] { verify(program(1)); }).find("load4 x[qb*8] reaches elements [8, 67], outside the parameter's 64 elements"),
            std::string::npos);
}

// Each warp of 64 threads all-reduces its 32 values of x with `combine`; every lane stores the result.
Program warpReduce(Fn combine, int64_t guardBelow = 0, int64_t threads = 64) {
  Kernel k;
  k.name = "k_warp";
  k.block = {threads, 1, 1};
  k.floatVars = {"v", "tmp"};
  Idx tid = idxVar(2, "tid");
  k.body.push_back(defIdx(2, "tid", threadIdx()));
  k.body.push_back(assign(0, loadGlobal(0, tid)));
  Block reduce = warpAllReduce(combine, 0, 1);
  if (guardBelow) k.body.push_back(ifLess(tid, idxConst(guardBelow), std::move(reduce)));
  else k.body.insert(k.body.end(), reduce.begin(), reduce.end());
  k.body.push_back(storeGlobal(1, tid, fvar(0)));
  return program(threads, threads, std::move(k));
}

TEST(KernelInterpreter, WarpShuffleAllReduce) {
  HostTensor x = ramp(64);
  for (Fn fn : {Fn::Add, Fn::Max}) {
    Program p = warpReduce(fn);
    verify(p);
    auto out = interpret(p, {x});
    for (int w = 0; w < 2; ++w) {
      double sum = 0;
      float mx = x.values[w * 32];
      for (int l = 0; l < 32; ++l) {
        sum += x.values[w * 32 + l];
        mx = std::max(mx, x.values[w * 32 + l]);
      }
      for (int l = 0; l < 32; ++l) {
        float got = out[0].values[w * 32 + l];
        EXPECT_EQ(got, out[0].values[w * 32]) << "lanes of a butterfly agree exactly; lane " << l;
        if (fn == Fn::Add) EXPECT_NEAR(got, sum, 1e-5 * std::abs(sum)) << "warp " << w;
        else EXPECT_EQ(got, mx) << "warp " << w;
      }
    }
    expectNvccCompiles(p);
  }
  std::string text = print(warpReduce(Fn::Add));
  EXPECT_NE(text.find("  %tmp = shfl.xor %v, 16\n  %v = add(%v, %tmp)\n  %tmp = shfl.xor %v, 8\n"), std::string::npos) << text;
  std::string cu = cuda::emit(warpReduce(Fn::Add)).sources[0].text;
  EXPECT_NE(cu.find("  tmp = __shfl_xor_sync(0xffffffffu, v, 16);\n  v = kiln::add(v, tmp);\n"), std::string::npos) << cu;
  // One shuffle swaps neighbours; src == dst is read by every lane before any writes.
  Program swap = warpReduce(Fn::Add);
  Kernel& k = swap.kernels[0];
  k.body.erase(k.body.begin() + 2, k.body.end() - 1);
  k.body.insert(k.body.end() - 1, shuffleXor(0, 0, 1));
  auto out = interpret(swap, {x});
  for (int t = 0; t < 64; ++t) EXPECT_EQ(out[0].values[t], x.values[t ^ 1]) << t;
}

TEST(KernelInterpreter, WarpShuffleFaults) {
  std::string msg = errorOf([&] { verify(warpReduce(Fn::Add, /*guardBelow=*/48)); });
  EXPECT_NE(msg.find("kernel k_warp: shuffle under thread-dependent control flow `if (tid < 48)`"), std::string::npos) << msg;
  msg = errorOf([&] { interpret(warpReduce(Fn::Add, 48), {ramp(64)}); });
  EXPECT_NE(msg.find("kernel k_warp: shuffle reached by 16 of 32 lanes of warp 1 (block 0)"), std::string::npos) << msg;
  msg = errorOf([&] { verify(warpReduce(Fn::Add, 0, /*threads=*/48)); });
  EXPECT_NE(msg.find("shuffle in a block of 48 threads (not whole warps"), std::string::npos) << msg;
  msg = errorOf([&] { interpret(warpReduce(Fn::Add, 0, 48), {ramp(48)}); });
  EXPECT_NE(msg.find("shuffle in a block of 48 threads"), std::string::npos) << msg;
  EXPECT_THROW(shuffleXor(0, 1, 3), InternalError);
  EXPECT_THROW(shuffleXor(0, 1, 32), InternalError);
}

// The block reduction with its shared buffer in dynamic shared memory, after `bigElements` bf16 elements of
// another dynamic buffer (written once, so that the emitted code references it).
Program dynamicReduce(int64_t bigElements) {
  Program p = blockReduce(1000);
  Kernel& k = p.kernels[0];
  k.shared[0].dynamic = true;
  k.shared.push_back(SharedBuffer{"big", bigElements, DType::BF16, /*dynamic=*/true});
  k.body.push_back(ifLess(threadIdx(), idxConst(1), {storeShared(1, idxConst(bigElements - 1), fconst(1.f))}));
  k.dynamicSharedBytes = k.dynamicBuffersBytes();
  return p;
}

TEST(KernelInterpreter, DynamicSharedMemory) {
  Program p = dynamicReduce(40000);
  const Kernel& k = p.kernels[0];
  EXPECT_EQ(k.sharedBytes(), 0);
  EXPECT_EQ(k.dynamicSharedOffset(0), 0);
  EXPECT_EQ(k.dynamicSharedOffset(1), 512);
  EXPECT_EQ(k.dynamicBuffersBytes(), 512 + 80000);
  verify(p);
  HostTensor x = ramp(1000);
  double ref = std::accumulate(x.values.begin(), x.values.end(), 0.0);
  EXPECT_NEAR(interpret(p, {x})[0].values[0], ref, 1e-4 * std::abs(ref));
  std::string text = print(p);
  EXPECT_NE(text.find("shared 0 bytes (dynamic 80512 bytes)"), std::string::npos) << text;
  EXPECT_NE(text.find("  shared red: f32[128] dynamic at byte 0\n  shared big: bf16[40000] dynamic at byte 512\n"),
            std::string::npos) << text;
  EXPECT_EQ(toJson(p)["kernels"][0]["shared"][1]["dynamic_offset"], 512);
  std::string cu = cuda::emit(p).sources[0].text;
  EXPECT_NE(cu.find("  extern __shared__ __align__(1024) unsigned char kiln_dynamic_shared[];\n"
                    "  float* const red = reinterpret_cast<float*>(kiln_dynamic_shared + 0);  // 128 elements\n"
                    "  __nv_bfloat16* const big = reinterpret_cast<__nv_bfloat16*>(kiln_dynamic_shared + 512);"),
            std::string::npos) << cu;
  expectNvccCompiles(p);
  // A dynamic buffer after one of 3 bf16 elements starts at the next 16 bytes.
  Kernel odd = k;
  odd.shared = {SharedBuffer{"a", 3, DType::BF16, true}, SharedBuffer{"s", 4, DType::F32}, SharedBuffer{"b", 1, DType::F32, true}};
  EXPECT_EQ(odd.dynamicSharedOffset(2), 16);
  EXPECT_EQ(odd.dynamicBuffersBytes(), 20);
  EXPECT_EQ(odd.sharedBytes(), 16);
}

TEST(KernelVerifier, SharedMemoryLimitsComeFromTheTarget) {
  {
    Program p = dynamicReduce(40000);
    p.kernels[0].dynamicSharedBytes = 80000;
    std::string msg = errorOf([&] { verify(p); });
    EXPECT_NE(msg.find("dynamic shared buffers need 80512 bytes but the kernel launches with 80000 bytes"), std::string::npos) << msg;
  }
  {
    Program p = dynamicReduce(120000);  // 240512 bytes
    std::string msg = errorOf([&] { verify(p); });
    EXPECT_NE(msg.find("240512 bytes of shared memory in all (0 static + 240512 dynamic; at most 232448 per block on sm_90a)"),
              std::string::npos) << msg;
  }
  {
    Program p = dynamicReduce(51000);  // 102512 bytes: fine on the H200, too much for the L40S
    EXPECT_NO_THROW(verify(p));
    p.target = targetFor("sm_89");
    std::string msg = errorOf([&] { verify(p); });
    EXPECT_NE(msg.find("at most 101376 per block on sm_89"), std::string::npos) << msg;
  }
  {
    Program p = dynamicReduce(100);
    p.kernels[0].shared.push_back(SharedBuffer{"static_big", 12 * 1024});  // 48 KiB of f32 + 512 more bytes
    p.kernels[0].shared[0].dynamic = false;
    p.kernels[0].dynamicSharedBytes = p.kernels[0].dynamicBuffersBytes();
    std::string msg = errorOf([&] { verify(p); });
    EXPECT_NE(msg.find("49664 bytes of static shared memory (at most 49152 on sm_90a; mark large buffers dynamic)"),
              std::string::npos) << msg;
  }
}

// Two cp.async groups per thread of 64: x[0..256) into shared `lo` (16-byte copies), then x[256..500) into
// shared `hi` with a valid-bytes operand that zero-fills past the end of x (500 elements); wait for the first
// group, barrier, copy `lo` to y[0..256) (elements other threads copied), wait for the rest, barrier, copy `hi`.
struct AsyncOptions {
  int firstWait = 1;       // 2: the first group is never waited for before the reads
  bool firstBarrier = true;
  int64_t shift = 0;       // added to the shared index of the first copies (misaligned when not a multiple of 4)
};
Program asyncCopy(AsyncOptions o = {}) {
  Kernel k;
  k.name = "k_async";
  k.block = {64, 1, 1};
  k.shared = {SharedBuffer{"lo", 260}, SharedBuffer{"hi", 256}};
  Idx tid = idxVar(2, "tid"), i = idxVar(3, "i");
  k.body.push_back(defIdx(2, "tid", threadIdx()));
  k.body.push_back(cpAsync(0, idxMul(tid, 4) + idxConst(o.shift), 0, idxMul(tid, 4), 16));
  k.body.push_back(cpAsyncCommit());
  Idx left = idxConst(500 - 256) + idxMul(tid, -4);  // elements of x left from this thread's first
  k.body.push_back(cpAsync(1, idxMul(tid, 4), 0, idxMul(tid, 4) + idxConst(256), 16,
                           idxMin(idxConst(16), idxMax(idxConst(0), idxMul(left, 4)))));
  k.body.push_back(cpAsyncCommit());
  k.body.push_back(cpAsyncWait(o.firstWait));
  if (o.firstBarrier) k.body.push_back(barrier());
  k.body.push_back(forLoop(3, "i", tid, idxConst(256), 64, {storeGlobal(1, i, loadShared(0, i))}));
  k.body.push_back(cpAsyncWait(0));
  k.body.push_back(barrier());
  k.body.push_back(forLoop(3, "i", tid, idxConst(256), 64, {storeGlobal(1, i + idxConst(256), loadShared(1, i))}));
  return program(500, 512, std::move(k));
}

TEST(KernelInterpreter, CpAsyncGroups) {
  Program p = asyncCopy();
  verify(p);
  HostTensor x = ramp(500);
  auto out = interpret(p, {x});
  for (int e = 0; e < 512; ++e) ASSERT_EQ(out[0].values[e], e < 500 ? x.values[e] : 0.f) << e;
  std::string text = print(p);
  EXPECT_NE(text.find("  cp.async16 shared lo[tid*4] <- x[tid*4]\n  cp.async.commit\n"
                      "  cp.async16 shared hi[tid*4] <- x[tid*4 + 256] valid min(16, max(0, (tid*-4 + 244)*4)) bytes\n"
                      "  cp.async.commit\n  cp.async.wait 1\n  barrier\n"),
            std::string::npos) << text;
  std::string cu = cuda::emit(p).sources[0].text;
  EXPECT_NE(cu.find("  __shared__ __align__(16) float lo[260];\n"), std::string::npos) << cu;
  EXPECT_NE(cu.find("  kiln::cp_async<16>(&lo[tid*4], &in0[tid*4]);\n  kiln::cp_async_commit();\n"), std::string::npos) << cu;
  EXPECT_NE(cu.find("  kiln::cp_async<16>(&hi[tid*4], &in0[tid*4 + 256], min(16, max(0, (tid*-4 + 244)*4)));\n"), std::string::npos)
      << cu;
  EXPECT_NE(cu.find("  kiln::cp_async_wait<1>();\n"), std::string::npos) << cu;
  expectNvccCompiles(p);
}

TEST(KernelInterpreter, CpAsyncFaults) {
  // Not waited for: a barrier alone completes nothing.
  std::string msg = errorOf([&] { interpret(asyncCopy({.firstWait = 2}), {ramp(500)}); });
  EXPECT_NE(msg.find("kernel k_async: thread 0 of block 0: read of shared memory whose cp.async has not been waited for: lo[0] "
                     "(copied by thread 0)"), std::string::npos) << msg;
  // Waited for, but another thread's copy is read without a barrier after the wait.
  msg = errorOf([&] { interpret(asyncCopy({.firstBarrier = false}), {ramp(500)}); });
  EXPECT_NE(msg.find("kernel k_async: thread 1 of block 0 reads shared lo[1], which thread 0's cp.async wrote, with no barrier "
                     "after that thread's wait"), std::string::npos) << msg;
  // Misaligned destination.
  msg = errorOf([&] { interpret(asyncCopy({.shift = 2}), {ramp(500)}); });
  EXPECT_NE(msg.find("thread 0 of block 0: cp.async16 shared lo[2] <- x[0]: misaligned"), std::string::npos) << msg;
  msg = errorOf([&] { verify(asyncCopy({.shift = 2})); });
  EXPECT_NE(msg.find("kernel k_async: cp.async not provably aligned: cp.async16 shared lo[tid*4 + 2] <- x[tid*4]"), std::string::npos)
      << msg;
  // Shifted by a whole copy: aligned, but past the end of `lo`.
  msg = errorOf([&] { verify(asyncCopy({.shift = 8})); });
  EXPECT_NE(msg.find("cp.async into shared lo[tid*4 + 8] indexes [8, 260], outside the buffer's 260 elements"), std::string::npos)
      << msg;
  // Without the valid-bytes operand the second copy reads past x.
  Program unguarded = asyncCopy();
  unguarded.kernels[0].body[3].as<op::CpAsync>().validBytes = nullptr;
  msg = errorOf([&] { verify(unguarded); });
  EXPECT_NE(msg.find("cp.async16 reads x[tid*4 + 256] over elements [256, 511], outside the parameter's 500 elements"),
            std::string::npos) << msg;
  msg = errorOf([&] { interpret(unguarded, {ramp(500)}); });
  EXPECT_NE(msg.find("thread 61 of block 0: cp.async16 shared hi[244] <- x[500]: reads [500, 503], out of bounds"), std::string::npos)
      << msg;
  Program old = asyncCopy();
  old.target.cpAsync = false;
  EXPECT_NE(errorOf([&] { verify(old); }).find("cp.async on sm_90a, which does not have it"), std::string::npos);
  EXPECT_THROW(cpAsync(0, idxConst(0), 0, idxConst(0), 12), InternalError);
}

}  // namespace
}  // namespace kiln::kernel
