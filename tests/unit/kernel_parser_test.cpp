// The Kernel IR parser (kiln/kernel/parser.h): for every fixture, the Kernel IR the pipeline makes prints, parses and
// prints again to the same text, and the parsed Program verifies; for a few small fixtures it also interprets to the
// same outputs as the original. Malformed text gives one line naming the file, line and column.
#include <gtest/gtest.h>

#include "test_support.h"

#include <filesystem>
#include <set>

#include "kiln/driver/pipeline.h"
#include "kiln/kernel/lower.h"
#include "kiln/kernel/parser.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;

std::vector<std::string> allFixtures() {
  std::set<std::string> names;
  for (auto& e : fs::directory_iterator(fs::path(KILN_SOURCE_DIR) / "models" / "fixtures"))
    if (e.path().extension() == ".pt") names.insert(e.path().stem().string());
  return {names.begin(), names.end()};
}

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

INSTANTIATE_TEST_SUITE_P(Fixtures, KernelParserRoundTrip, ::testing::ValuesIn(allFixtures()),
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

// Flash attention in one warpgroup with both products by wgmma: A from registers, B mn-major and swizzled.
TEST(KernelParserRoundTripLarger, AttentionByWgmma) {
  tile::Program t = compileModel(test::fixturePath("attention_bf16_deep"), {}, {}, "tile").tileIR;
  for (auto& s : t.schedules) {
    auto& f = std::get<tile::FlashAttention>(s);
    f.blockQ = 64;
    f.warpRows = 16;
    f.keySplit = 1;
    f.scoresByWgmma = false;
    f.valuesByWgmma = false;
  }
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
