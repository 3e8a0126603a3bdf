// The Kernel IR parser (kiln/kernel/parser.h): for every fixture, the Kernel IR the pipeline makes prints, parses and
// prints again to the same text, and the parsed Program verifies; for a few small fixtures it also interprets to the
// same outputs as the original. Malformed text gives one line naming the file, line and column.
#include <gtest/gtest.h>

#include "attention_support.h"
#include "test_support.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <set>

#include "kiln/driver/pipeline.h"
#include "kiln/kernel/lower.h"
#include "kiln/kernel/parser.h"

namespace kiln {
namespace {

kernel::Program compileToKernel(const std::string& fixture) {
  return compileModel(test::fixturePath(fixture), {}, PipelineOptions{}, "kernel").kernelIR;
}

class KernelParserRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(KernelParserRoundTrip, PrintParsePrintIsIdentical) {
  kernel::Program p = compileToKernel(GetParam());
  const std::string text = kernel::print(p);
  kernel::Program parsed = kernel::parse(text, GetParam() + ".kir");
  EXPECT_EQ(kernel::print(parsed), text);
  EXPECT_NO_THROW(kernel::verify(parsed));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KernelParserRoundTrip, ::testing::ValuesIn(test::allFixtures()),
                         [](const auto& info) { return info.param; });

// The parsed Program computes what the original does, bit for bit: its variables, slots and buffers mean the same.
void expectSameOutputs(const kernel::Program& p, const kernel::Program& parsed, const std::string& what) {
  ASSERT_EQ(parsed.buffers.size(), p.buffers.size());
  kernel::Program bound = parsed;
  for (size_t i = 0; i < p.buffers.size(); ++i) bound.buffers[i].weight = p.buffers[i].weight;  // the text names weights only
  auto inputs = test::randomInputs(p, 7);
  auto want = kernel::interpret(p, inputs), got = kernel::interpret(bound, inputs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i].values, want[i].values) << what << " output " << i;
}

void expectRoundTrip(const kernel::Program& p, const std::string& what, bool interpret = false) {
  const std::string text = kernel::print(p);
  kernel::Program parsed = kernel::parse(text, what);
  EXPECT_EQ(kernel::print(parsed), text) << what;
  EXPECT_NO_THROW(kernel::verify(parsed)) << what;
  if (interpret) expectSameOutputs(p, parsed, what);
}

// The golden configurations with larger inputs: tiled CUDA-core products, tensor-core products from operand pairs.
TEST(KernelParserRoundTripLarger, TiledProducts) {
  expectRoundTrip(compileModel(test::fixturePath("linear"), {frontend::parseInputOverride("x=2x512x64")}, {}, "kernel").kernelIR,
                  "linear_tiled");
  expectRoundTrip(
      compileModel(test::fixturePath("mlp"), {frontend::parseInputOverride("x=4x512x64")}, {}, "kernel", DType::BF16).kernelIR,
      "mlp_bf16_tiled");
}

// What the pipeline makes only at model sizes (tiny fixtures stay below the passes' thresholds), forced as the
// warpgroup-product tests force it: wgmma products with TMA, a producer warp (warp-uniform roles, elected copies, named
// barriers), clusters that multicast, unrolled rings, and stream-K walks (counters).
kernel::Program forcedProducts(bool streamK) {
  tile::Program t = compileModel(test::fixturePath("mlp_bf16_wide"), {}, {}, "tile").tileIR;
  tile::tileContractions(t, /*minTiles=*/1);
  tile::tensorCoreContractions(t);
  tile::fuseOperandProducers(t);
  tile::warpgroupProducts(t);
  tile::stackOperands(t);
  tile::overlapWgmma(t);
  tile::tmaCopies(t);
  for (tile::Schedule& s : t.schedules)
    if (auto* c = std::get_if<tile::TiledContraction>(&s); c && c->a.copy == tile::TiledContraction::Copy::Tma && !c->stackedB)
      c->tileN = 32;
  tile::specializeWarps(t, /*everywhere=*/true);
  tile::multicastOperands(t);
  if (streamK) tile::streamKProducts(t, 10);
  else tile::unrollRings(t);
  tile::verify(t);
  kernel::Program k = kernel::lowerFromTile(t);
  EXPECT_TRUE(kernel::multicastOperands(k));
  if (!streamK) {
    EXPECT_TRUE(kernel::unrollRings(k));
  }
  kernel::overlapLaunches(k);
  return k;
}

TEST(KernelParserRoundTripLarger, ProducerWarpsClustersAndStreamK) {
  for (bool streamK : {false, true}) {
    kernel::Program k = forcedProducts(streamK);
    const std::string text = kernel::print(k);
    for (const char* op : {"elected tma.load.multicast", "(warp-uniform)", "mbarrier.arrive.cluster", "128-byte-swizzled"})
      EXPECT_NE(text.find(op), std::string::npos) << op;
    if (streamK) {
      EXPECT_NE(text.find("counter.await"), std::string::npos);
    }
    expectRoundTrip(k, streamK ? "stream-K products" : "producer-warp products", /*interpret=*/true);
  }
}

// Packed attention (Kernel::groups): attention_bf16_512 on a 40-SM variant of the H200 packs query blocks in pairs.
TEST(KernelParserRoundTripLarger, PackedAttentionGroups) {
  Target fewSms = defaultTarget();
  fewSms.smCount = 40;
  kernel::Program k =
      compileModel(test::fixturePath("attention_bf16_512"), {}, PipelineOptions{}, "kernel", std::nullopt, fewSms).kernelIR;
  ASSERT_NE(kernel::print(k).find(" groups 2"), std::string::npos);
  expectRoundTrip(k, "packed attention");
}

// Flash attention in one warpgroup with both products by wgmma: A from registers, B mn-major and swizzled.
TEST(KernelParserRoundTripLarger, AttentionByWgmma) {
  tile::Program t = attention_test::oneWarpgroup("attention_bf16_deep", "sm_90a");
  ASSERT_TRUE(tile::attentionScoresByWgmma(t));
  ASSERT_TRUE(tile::attentionValuesByWgmma(t));
  tile::verify(t);
  kernel::Program k = kernel::lowerFromTile(t);
  const std::string text = kernel::print(k);
  for (const char* op : {"registers $", "mn-major 128-byte-swizzled"}) EXPECT_NE(text.find(op), std::string::npos) << op;
  expectRoundTrip(k, "attention by wgmma", /*interpret=*/true);
}

class KernelParserInterprets : public ::testing::TestWithParam<std::string> {};

TEST_P(KernelParserInterprets, SameOutputsAsTheOriginal) {
  kernel::Program p = compileToKernel(GetParam());
  expectSameOutputs(p, kernel::parse(kernel::print(p)), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KernelParserInterprets,
                         ::testing::Values("elementwise", "softmax", "rmsnorm", "mlp", "attention_bf16"),
                         [](const auto& info) { return info.param; });

// One statement of every kind, every form of mma, ldmatrix and wgmma, and every index and float operator, built with
// the constructors (it need not verify: the pipeline makes some of these kinds nowhere, so only this test reads them).
TEST(KernelParser, EveryStatementKindRoundTrips) {
  using namespace kernel;  // NOLINT(google-build-using-namespace): the constructors read as the IR
  Program p;
  p.modelName = "every_kind";
  p.target = targetFor("sm_90a");
  p.buffers = {loop::Buffer{loop::Buffer::Kind::Input, "x", DType::BF16, {256}, nullptr},
               loop::Buffer{loop::Buffer::Kind::Counters, "counters", DType::I64, {4}, nullptr},
               loop::Buffer{loop::Buffer::Kind::Output, "out0", DType::F32, {256}, nullptr}};
  p.inputs = {0};
  p.outputs = {2};
  Kernel k;
  k.name = "k0_all";
  k.grid = {4, 1, 1};
  k.block = {160, 1, 1};
  k.cluster = 2;
  k.dynamicSharedBytes = 4096;
  k.origins = {"aten::mm @ m.py:1", "aten::add @ m.py:2"};
  k.params = {{0, "x", DType::BF16, 256, false}, {1, "counters", DType::I64, 4, true}, {2, "out0", DType::F32, 256, true}};
  k.tensorMaps = {TensorMap{0, 0, 4, 64, 128, 4, 64, true}};
  k.shared = {SharedBuffer{"a", 1024, DType::BF16, true, false}, SharedBuffer{"b", 1024, DType::BF16, true, false},
              SharedBuffer{"bars", 4, DType::F32, false, true}, SharedBuffer{"f", 64, DType::F32, false, false}};
  for (int i = 0; i < 20; ++i) k.floatVars.push_back(fmt::format("v{}", i));
  for (int i = 0; i < 6; ++i) k.pairVars.push_back(fmt::format("p{}", i));
  const Idx t = threadIdx(), i = idxVar(2, "i"), j = idxVar(3, "j"), u = idxVar(4, "u"), n = idxVar(5, "n");
  std::vector<int> acc(8);
  for (int a = 0; a < 8; ++a) acc[a] = a;
  Stmt::CoreMatrices plain{64, 512, false, false}, swizzled{0, 512, true, false}, mnMajor{512, 1024, true, true};
  Stmt scaled = wgmma(DType::BF16, 0, idxConst(0), swizzled, 1, idxConst(0), plain, 16, acc);
  scaled.as<op::Wgmma>().scaleD = mod(i, 2);
  Block inner = {
      storeShared(3, t, fselect(i, idxConst(3), fconst(std::numeric_limits<float>::infinity()), fconst(-0.5f))),
      storeGlobal(2, t, fapply(Fn::Cast, {loadShared(3, t)}, DType::BF16)),
      assign(0, fapply(Fn::Where, {fvar(1), fconst(1e-05f), loadGlobal(0, idxLoad(0, "x", t))})),
      loadVector(0, idxMul(t, 2), {1, 2}),
      storeVector(2, idxMul(t, 2), {fvar(1), fapply(Fn::Exp2, {fvar(2)})}),
      loadSharedVector(3, idxMul(t, 4), {3, 4, 5, 6}),
      shuffleXor(7, 7, 16),
      cpAsync(0, idxMul(t, 8), 0, idxMul(t, 8), 16, idxMin(idxConst(16), idxMax(idxConst(0), idxAdd(idxMul(t, -2), 256)))),
      cpAsync(3, t, 2, t, 4),
      cpAsyncCommit(),
      cpAsyncWait(1),
      ldmatrix(0, idxMul(t, 8), 2, false, {8, 9, 10, 11}),
      ldmatrixPairs(1, idxMul(t, 8), true, {0, 1, 2, 3}),
      mma(DType::BF16, {0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}),
      mmaFromShared(DType::F16, 0, {idxConst(0), idxConst(2), idxConst(4), idxConst(6)}, 1, {idxConst(0), idxConst(2)},
                    {12, 13, 14, 15}),
      mmaFromPairs(DType::BF16, {0, 1, 2, 3}, {4, 5}, {12, 13, 14, 15}),
      packPair(DType::BF16, 5, 16, 17),
      wgmmaFence(),
      scaled,
      wgmmaRegA(DType::BF16, {0, 1, 2, 3}, 1, shl(i, 9), mnMajor, 16, acc),
      wgmmaCommit(),
      wgmmaWait(0),
      fenceProxyAsync(),
  };
  Block roles = {
      mbarrierInit(2, idxConst(0), 1),
      mbarrierArrive(2, idxConst(1)),
      cpAsyncMbarrierArrive(2, idxConst(1)),
      elected(mbarrierArriveExpectTx(2, idxConst(0), 1024)),
      elected(tmaLoadMulticast(0, idxConst(0), 0, idxConst(0), shr(i, 1), 2, idxConst(0))),
      tmaLoad(1, idxConst(0), 0, idxConst(64), idxConst(0), 2, idxConst(0)),
      mbarrierWait(2, idxConst(0), idxXor(mod(i, 2), idxConst(1))),
      mbarrierArriveCluster(2, idxConst(3)),
      namedBarrier(1, 128),
      counterRelease(1, blockIdx()),
      counterAwait(1, floorDiv(blockIdx(), 2), idxConst(3)),
  };
  k.body = {defIdx(2, "i", t + blockIdx() * idxConst(160)),
            defWarpUniform(4, "u", floorDiv(t, 32)),
            fenceMbarrierInit(),
            clusterBarrier(),
            forLoop(3, "j", idxConst(0), idxVar(2, "i"), 2, inner),
            ifLess(u, idxConst(4), roles),
            barrier(),
            blockTicket(5, "n", 1, idxConst(0), 4),
            storeGlobal(2, n, fconst(std::nanf("")))};
  p.kernels.push_back(k);
  const std::string text = print(p);
  EXPECT_EQ(print(parse(text, "every_kind.kir")), text);
}

// A small well-formed program to break in the error tests.
const char* kSmall = R"(// kiln kernel IR: small
target sm_90a
buffer x : f32[64] input
buffer out0 : f32[64] output
inputs x

kernel k0 grid(1,1,1) block(64,1,1) shared 0 bytes
  params: out out0: f32[64] (written), in x: f32[64]
  floats: %v0
  i = threadIdx.x
  %v0 = load x[i]
  store out0[i] = exp(%v0)

return out0
)";

std::string errorOf(const std::string& text) {
  try {
    kernel::parse(text, "bad.kir");
  } catch (const UserError& e) {
    return e.what();
  }
  return "no error";
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  text.replace(text.find(from), from.size(), to);
  return text;
}

TEST(KernelParser, SmallProgramParsesAndVerifies) {
  kernel::Program p = kernel::parse(kSmall);
  EXPECT_EQ(kernel::print(p), kSmall);
  EXPECT_NO_THROW(kernel::verify(p));
}

TEST(KernelParser, UndefinedVariableNamesItsLineAndColumn) {
  EXPECT_EQ(errorOf(replaced(kSmall, "load x[i]", "load x[j]")), "bad.kir:11:16: index variable 'j' is not defined here");
}

TEST(KernelParser, UnknownFunction) {
  EXPECT_EQ(errorOf(replaced(kSmall, "exp(%v0)", "expo(%v0)")), "bad.kir:12:19: unknown function 'expo'");
}

TEST(KernelParser, UndeclaredFloat) {
  EXPECT_EQ(errorOf(replaced(kSmall, "exp(%v0)", "exp(%v9)")), "bad.kir:12:23: float '%v9' is not declared in the kernel's floats");
}

TEST(KernelParser, UnclosedLoop) {
  EXPECT_EQ(errorOf(replaced(kSmall, "  %v0 = load x[i]\n", "  for j in 0..4 step 1 {\n  %v0 = load x[i]\n")),
            "bad.kir:14:1: a 'for' or 'if' block is not closed by '}'");
}

TEST(KernelParser, MissingReturn) {
  EXPECT_EQ(errorOf(replaced(kSmall, "return out0\n", "")), "bad.kir:13:1: the program ends without its 'return' line");
}

TEST(KernelParser, UnknownTarget) {
  EXPECT_EQ(errorOf(replaced(kSmall, "sm_90a", "sm_91")).substr(0, 35), "bad.kir:2:8: unknown target 'sm_91'");
}

}  // namespace
}  // namespace kiln
