// tile-tiled-contractions and its lowering: every matrix product of the fixtures, tiled (the fixtures are too
// small for the default rule, so the test asks for tiling whatever the block count), must compute what the
// Loop-IR interpreter computes, pass Kernel IR's verifier (barriers, shared bounds) and compile with nvcc.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "kiln/cuda/emitter.h"
#include "kiln/driver/pipeline.h"
#include "kiln/kernel/lower.h"
#include "kiln/support/error.h"
#include "kiln/tile/layout.h"
#include "test_support.h"

namespace kiln {
namespace {

// nvcc (sm_90) compiles every kernel of `p` without an error or a warning.
void expectNvccCompiles(const kernel::Program& p) {
  test::TempDir tmp;
  try {
    cuda::writeArtifacts(p, cuda::emit(p), tmp.path / "artifacts", cuda::ArtifactOptions{"sm_90", true});
  } catch (const UserError& e) {
    ADD_FAILURE() << e.what();
  }
}

struct Tiled {
  Compiled c;
  int tiledKernels = 0;
  kernel::Program kernelIR;
};

// Square tiles of `tile` with micro x micro outputs per thread (CUDA cores), `tk` deep.
void setTiles(tile::TiledContraction& s, int64_t tile, int64_t micro, int64_t tk) {
  s.tileM = s.tileN = tile;
  s.microM = s.microN = micro;
  s.tileK = tk;
}

// The default pipeline without the passes that refine tiled schedules (the tests apply those by hand).
// Attention stays three kernels here (loop-fuse-attention off): its q·kᵀ and p·v are products these tests tile, and
// the flash kernel, which rounds probabilities to bf16 for the tensor cores, is checked in attention_test.cpp.
PipelineOptions unrefined() {
  PipelineOptions o;
  o.disable = {"loop-fuse-attention", "tile-tile-long-reductions", "tile-mma-operand-pairs", "tile-deep-k-slices", "tile-pipeline-async-copies",
               "tile-prefetch-slices"};
  return o;
}

// Tiles every product, with the pass's choice or, given `tiles` = {tile_m, tile_n, micro_m, micro_n}, that shape;
// The passes that change how a tiled product stages its operand slices, applied by hand to the tiled schedules.
struct Slices {
  bool deep = false;      // tile-deep-k-slices
  bool prefetch = false;  // tile-prefetch-slices
  bool pairs = false;     // tile-mma-operand-pairs (tensor cores only)
  bool async = false;     // tile-pipeline-async-copies (tensor cores with pairs only)
  std::string name() const {
    return fmt::format("{}{}{}{}", deep ? "deep" : "", prefetch ? "+prefetch" : "", pairs ? "+pairs" : "", async ? "+async" : "");
  }
};
const Slices kSliceVariants[] = {{true, false}, {false, true}, {true, true}};
const Slices kTensorCoreSliceVariants[] = {{true, false},       {false, true},       {true, true},
                                           {false, false, true}, {true, true, true},  {false, false, true, true},
                                           {true, false, true, true}};

// The passes after tile-fuse-operand-producers, in pipeline order. tile-prefetch-slices prefetches only products on
// CUDA cores; the lowering prefetches any schedule that asks, so tensor-core schedules get the copy kind by hand.
void applySlices(tile::Program& p, const Slices& slices) {
  if (slices.pairs) tile::pairMmaOperands(p);
  if (slices.deep) tile::deepenKSlices(p);
  if (slices.async) tile::pipelineAsyncCopies(p);
  if (!slices.prefetch) return;
  tile::prefetchSlices(p);
  for (size_t i = 0; i < p.schedules.size(); ++i)
    if (auto* s = std::get_if<tile::TiledContraction>(&p.schedules[i]); s && tile::scheduledTensorCoreType(p.schedules[i])) {
      tile::TiledContraction prefetched = *s;
      prefetched.a.copy = prefetched.b.copy = tile::TiledContraction::Copy::RegisterPrefetch;
      if (tile::prefetchRegisters(prefetched, static_cast<int64_t>(p.loop.kernels[i].stages.size())) <= tile::kPrefetchRegisters)
        *s = prefetched;
    }
}

// Tiles every product, with the pass's choice or, given `tiles` = {tile_m, tile_n, micro_m, micro_n}, that shape;
// then the slice passes chosen in `slices`.
Tiled tileEverything(const std::string& model, std::vector<int64_t> tiles = {}, Slices slices = {}) {
  Tiled t;
  // The small fixtures get 32 tokens, so that their products have m >= 16 (the rule's minimum).
  std::vector<frontend::InputOverride> inputs;
  if (model == "linear") inputs.push_back(frontend::parseInputOverride("x=2x32x64"));
  if (model == "mlp") inputs.push_back(frontend::parseInputOverride("x=1x32x64"));
  t.c = compileModel(test::fixturePath(model), inputs, unrefined(), "tile");
  tile::tileContractions(t.c.tileIR, /*minTiles=*/1);
  for (auto& s : t.c.tileIR.schedules)
    if (auto* tc = std::get_if<tile::TiledContraction>(&s); tc && !tiles.empty()) {
      tc->tileM = tiles[0];
      tc->tileN = tiles[1];
      tc->microM = tiles[2];
      tc->microN = tiles[3];
    }
  tile::fuseOperandProducers(t.c.tileIR);
  applySlices(t.c.tileIR, slices);
  tile::verify(t.c.tileIR);
  for (auto& s : t.c.tileIR.schedules) t.tiledKernels += std::holds_alternative<tile::TiledContraction>(s);
  t.kernelIR = kernel::lowerFromTile(t.c.tileIR);
  kernel::verify(t.kernelIR);
  return t;
}

class TiledContraction : public ::testing::TestWithParam<std::string> {};

// The tiled kernels against the Loop-IR interpreter of the same (tiled, fused) program: the same k order, so only
// the epilogue's rounding may differ. And against LibTorch at DESIGN.md's tolerance: the fusion of a bf16
// producer into an operand skips the rounding of its stored value, as loop-fuse-producers does.
TEST_P(TiledContraction, KernelInterpreterMatchesLoopInterpreterAndLibTorch) {
  Tiled t = tileEverything(GetParam());
  EXPECT_GT(t.tiledKernels, 0) << "no matrix product recognised in " << GetParam();
  for (uint64_t seed : {1u, 2u}) {
    auto inputs = test::randomInputs(t.kernelIR, seed);
    auto got = kernel::interpret(t.kernelIR, inputs);
    auto want = loop::interpret(t.c.tileIR.loop, inputs);
    auto ref = frontend::runReference(test::fixturePath(GetParam()), inputs, /*onGpu=*/false);
    ASSERT_EQ(got.size(), want.size());
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < got.size(); ++i) {
      Comparison same = compare(got[i], want[i]), torch = compare(got[i], ref[i]);
      EXPECT_LE(same.relL2, 1e-6) << GetParam() << " output " << i << " seed " << seed;
      EXPECT_TRUE(passes(torch, ref[i].dtype)) << GetParam() << " output " << i << " rel L2 vs LibTorch " << torch.relL2;
    }
  }
}

// The pass picks 64x64 (4x4 per thread) for these; the smaller and non-square shapes are lowered the same way.
TEST(TiledContractionShapes, EveryTileShapeMatchesTheLoopInterpreter) {
  for (std::vector<int64_t> tiles : {std::vector<int64_t>{16, 16, 1, 1}, {32, 32, 2, 2}, {32, 64, 2, 4}, {64, 16, 4, 1}}) {
    Tiled t = tileEverything("llama_tiny", tiles);
    auto inputs = test::randomInputs(t.kernelIR, 7);
    auto want = loop::interpret(t.c.tileIR.loop, inputs);
    auto got = kernel::interpret(t.kernelIR, inputs);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_LE(compare(got[i], want[i]).relL2, 1e-6) << fmt::format("tiles {}", fmt::join(tiles, "x"));
  }
}

// Deeper slices (tile-deep-k-slices: tile_k 32 or 64) and slices prefetched through registers
// (tile-prefetch-slices) change only how k is staged, not the k order of the sums, so the result must equal the
// Loop-IR interpreter's as closely as without them. Reductions that are not a multiple of the slice (linear's 48)
// read zeros past the end; a prefetch past the last slice reads nothing.
TEST_P(TiledContraction, DeeperAndPrefetchedSlicesMatchTheLoopInterpreter) {
  for (const Slices& slices : kSliceVariants) {
    Tiled t = tileEverything(GetParam(), {}, slices);
    int changed = 0;
    for (auto& s : t.c.tileIR.schedules)
      if (auto* tc = std::get_if<tile::TiledContraction>(&s))
        changed += slices.deep ? tc->tileK > 16 : tc->a.copy == tile::TiledContraction::Copy::RegisterPrefetch;
    EXPECT_GT(changed, 0) << GetParam() << " " << slices.name();
    auto inputs = test::randomInputs(t.kernelIR, 5);
    auto got = kernel::interpret(t.kernelIR, inputs);
    auto want = loop::interpret(t.c.tileIR.loop, inputs);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_LE(compare(got[i], want[i]).relL2, 1e-6) << GetParam() << " " << slices.name() << " output " << i;
    expectNvccCompiles(t.kernelIR);
  }
}

// The deepest of 64 and 32 that fits 48 KB of static shared memory, never deeper than k rounded up to 16: the
// tiny Llama's 64 x 64 tiles take 64 with one stage, 32 for gate/up (two stages: 64 would need 66 KB); its q·kᵀ
// (k = 16) keeps 16.
TEST(DeepKSlices, DeepestSliceThatFitsSharedMemoryAndTheReduction) {
  Tiled t = tileEverything("llama_tiny", {}, Slices{true, false});
  std::set<int64_t> seen;
  for (size_t i = 0; i < t.c.tileIR.schedules.size(); ++i) {
    const auto* s = std::get_if<tile::TiledContraction>(&t.c.tileIR.schedules[i]);
    if (!s) continue;
    auto c = tile::findContraction(t.c.tileIR.loop.kernels[i], s->mAxis, s->nAxis);
    ASSERT_TRUE(c.has_value());
    const int64_t tk = s->tileK, stages = static_cast<int64_t>(t.c.tileIR.loop.kernels[i].stages.size());
    const int64_t shared = t.c.tileIR.target.staticSharedPerBlock;
    EXPECT_LE(tile::operandSliceBytes(*s, stages, tk), shared) << t.c.tileIR.loop.kernels[i].name;
    EXPECT_LE(tk, (c->k + 15) / 16 * 16) << t.c.tileIR.loop.kernels[i].name;
    if (tk < 64) {  // a deeper slice would not fit, or would pass the end of k
      const int64_t deeper = tk * 2;
      EXPECT_TRUE(tile::operandSliceBytes(*s, stages, deeper) > shared ||
                  deeper > (c->k + 15) / 16 * 16) << t.c.tileIR.loop.kernels[i].name << " tile_k " << tk;
    }
    seen.insert(tk);
  }
  EXPECT_EQ(seen, (std::set<int64_t>{16, 32, 64}));
  // On by default; --disable-pass keeps the 16-deep slices (seen before tile-stream-ffma-products replaces the schedule).
  PipelineOptions opts;
  opts.disable = {"tile-deep-k-slices", "tile-stream-ffma-products"};
  Compiled plain = compileModel(test::fixturePath("linear"), {frontend::parseInputOverride("x=2x512x64")}, opts, "tile");
  EXPECT_EQ(std::get<tile::TiledContraction>(plain.tileIR.schedules[0]).tileK, 16);
  opts.disable = {"tile-stream-ffma-products"};
  Compiled deep = compileModel(test::fixturePath("linear"), {frontend::parseInputOverride("x=2x512x64")}, opts, "tile");
  EXPECT_EQ(std::get<tile::TiledContraction>(deep.tileIR.schedules[0]).tileK, 64);
}

// Prefetching holds stages x (tile_m + tile_n) x tile_k / threads operand values per thread in registers: a
// schedule is prefetched only when that is at most kPrefetchRegisters. The slice depths tile-deep-k-slices picks
// stay within it (at most 64), so the bound is exercised on hand-set knobs: 32 x 32 tiles of 4 x 4 per thread
// (64 threads) hold tile_k values per thread.
TEST(PrefetchSlices, OnlyWithinTheRegisterBudgetAndOnlyOnCudaCores) {
  for (int64_t tk : {48, 80}) {
    Compiled c = compileModel(test::fixturePath("llama_tiny"), {}, unrefined(), "tile");
    tile::tileContractions(c.tileIR, /*minTiles=*/1);
    for (auto& s : c.tileIR.schedules)
      if (auto* tc = std::get_if<tile::TiledContraction>(&s)) setTiles(*tc, 32, 4, tk);
    EXPECT_EQ(tile::prefetchSlices(c.tileIR), tk <= tile::kPrefetchRegisters) << "tile_k " << tk;
  }
  PipelineOptions opts;  // tile-stream-ffma-products, which replaces the schedule whole, off
  opts.disable = {"tile-prefetch-slices", "tile-stream-ffma-products"};
  Compiled plain = compileModel(test::fixturePath("linear"), {frontend::parseInputOverride("x=2x512x64")}, opts, "tile");
  EXPECT_EQ(std::get<tile::TiledContraction>(plain.tileIR.schedules[0]).a.copy, tile::TiledContraction::Copy::Plain);
  opts.disable = {"tile-stream-ffma-products"};
  Compiled on = compileModel(test::fixturePath("linear"), {frontend::parseInputOverride("x=2x512x64")}, opts, "tile");
  EXPECT_EQ(std::get<tile::TiledContraction>(on.tileIR.schedules[0]).a.copy, tile::TiledContraction::Copy::RegisterPrefetch);
}

// A slice that does not split evenly over the threads (16 x 24 = 384 values for 256 threads): the second register
// of a thread is guarded (rr < rows); the verifier must see the guard and the result must not change.
TEST(PrefetchSlices, SlicesNotAMultipleOfTheThreadsMatchTheLoopInterpreter) {
  Compiled c = compileModel(test::fixturePath("llama_tiny"), {}, unrefined(), "tile");
  tile::tileContractions(c.tileIR, /*minTiles=*/1);
  for (auto& s : c.tileIR.schedules)
    if (auto* tc = std::get_if<tile::TiledContraction>(&s)) setTiles(*tc, 16, 1, 24);
  ASSERT_TRUE(tile::prefetchSlices(c.tileIR));
  tile::verify(c.tileIR);
  kernel::Program k = kernel::lowerFromTile(c.tileIR);
  kernel::verify(k);
  auto inputs = test::randomInputs(k, 9);
  auto got = kernel::interpret(k, inputs);
  auto want = loop::interpret(c.tileIR.loop, inputs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_LE(compare(got[i], want[i]).relL2, 1e-6) << "output " << i;
}

TEST_P(TiledContraction, NvccCompilesTheTiledKernels) {
  Tiled t = tileEverything(GetParam());
  expectNvccCompiles(t.kernelIR);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TiledContraction,
                         ::testing::Values("linear", "mlp", "attention", "llama_tiny", "hf_llama_tiny",
                                           "hf_llama_tiny_bf16"));

TEST(TiledContractionRule, RecognisesLlamaProductsAndNothingElse) {
  Compiled c = compileModel(test::fixturePath("llama_tiny"), {}, unrefined(), "loop");
  std::vector<std::string> found;
  for (auto& k : c.loopIR.kernels)
    if (tile::findContraction(k)) found.push_back(k.name);
  // Per layer: q/k/v, scores, p·v, o projection, gate/up, down; then the LM head. Not the norms, softmax, rotary.
  EXPECT_EQ(found.size(), 2u * 6u + 1u) << fmt::format("{}", fmt::join(found, ", "));
  auto scores = tile::findContraction(c.loopIR.kernels[4]);  // q·kᵀ: m = query position, n = key position
  ASSERT_TRUE(scores.has_value());
  EXPECT_EQ(scores->m, 16);
  EXPECT_EQ(scores->n, 16);
  EXPECT_EQ(scores->k, 16);
  EXPECT_EQ(scores->outerPoints, 4);  // heads
}

TEST(TiledContractionRule, RotaryIsInlinedIntoTheTiledScores) {
  // Forced tiling of the tiny Llama (64x64 tiles: one tile column of 16 keys) repeats each rotary element once
  // for q and twice for k (2 query heads per KV head): both fuse, 2 kernels fewer per layer.
  Tiled t = tileEverything("llama_tiny");
  EXPECT_EQ(t.c.tileIR.loop.kernels.size(), 24u - 2u * 2u);
  int scoresWithRotary = 0;
  for (auto& k : t.c.tileIR.loop.kernels) {
    bool neg = false, tiled = tile::findContraction(k).has_value();
    for (auto& o : k.origins) neg = neg || o.rfind("aten::neg", 0) == 0;
    scoresWithRotary += neg && tiled;
  }
  EXPECT_EQ(scoresWithRotary, 2);
}

TEST(TiledContractionRule, MatrixVectorProductsAreNeverTiled) {
  // One token: every projection has m = 1 (and attention m = n = 1), so even without a block-count floor
  // nothing is tiled.
  Compiled c = compileModel(test::fixturePath("hf_llama_tiny"), {frontend::parseInputOverride("input_ids=1x1:i64")},
                            PipelineOptions{}, "tile");
  EXPECT_FALSE(tile::tileContractions(c.tileIR, /*minTiles=*/1));
}

// Operand fusion removes only the producers it inlined: with dead kernels left in the program (their pass
// disabled), the schedules still match the kernels one to one (the verifier runs after every pass).
TEST(TiledContractionRule, OperandFusionKeepsSchedulesAlignedWithDeadKernelsAround) {
  PipelineOptions opts;
  opts.enable = {"tile-tiled-contractions", "tile-fuse-operand-producers"};
  opts.disable = {"loop-eliminate-dead-buffers"};
  for (const char* input : {"input_ids=1x256:i64", "input_ids=1x16:i64"}) {
    Compiled c = compileModel(test::fixturePath("hf_llama_tiny"), {frontend::parseInputOverride(input)}, opts, "kernel");
    EXPECT_EQ(c.tileIR.schedules.size(), c.tileIR.loop.kernels.size()) << input;
  }
}

TEST(TiledContractionRule, OnByDefaultAndCanBeDisabled) {
  Compiled t = compileModel(test::fixturePath("linear"), {frontend::parseInputOverride("x=2x512x64")}, PipelineOptions{}, "tile");
  EXPECT_TRUE(std::holds_alternative<tile::TiledContraction>(t.tileIR.schedules[0]));
  PipelineOptions disabled;
  disabled.disable = {"tile-tiled-contractions"};
  Compiled c = compileModel(test::fixturePath("linear"), {frontend::parseInputOverride("x=2x512x64")}, disabled, "tile");
  for (auto& s : c.tileIR.schedules) EXPECT_FALSE(std::holds_alternative<tile::TiledContraction>(s));
}

// tile-tile-long-reductions: below a wave of 16 x 16 tiles, a product whose threads would each
// run a long reduction alone is tiled anyway: probs·v of attention at 512 tokens (m 512, n 32, k 512: 64 tiles) —
// but not at 256 tokens (k 256), where tile-cooperative-reduce's block per row keeps it.
TEST(TiledContractionRule, LongReductionsLeftToOneThreadAreTiledBelowAWave) {
  auto scheduleOfLongestProduct = [](const char* input, PipelineOptions opts) {
    opts.disable.insert("loop-fuse-attention");  // the scores' product q·kᵀ over 512 keys
    Compiled c = compileModel(test::fixturePath("attention"), {frontend::parseInputOverride(input)}, opts, "tile");
    size_t longest = 0;
    int64_t k = 0;
    for (size_t i = 0; i < c.tileIR.loop.kernels.size(); ++i)
      if (auto p = tile::findContraction(c.tileIR.loop.kernels[i]); p && p->k > k) {
        k = p->k;
        longest = i;
      }
    return std::make_pair(k, c.tileIR.schedules.at(longest));
  };
  PipelineOptions disabled, enabled;
  disabled.disable = {"tile-tile-long-reductions"};
  auto [k512, before] = scheduleOfLongestProduct("x=1x512x32", disabled);
  EXPECT_EQ(k512, 512);
  EXPECT_TRUE(std::holds_alternative<tile::PointwiseMap>(before));
  auto [k, after] = scheduleOfLongestProduct("x=1x512x32", enabled);
  ASSERT_TRUE(std::holds_alternative<tile::TiledContraction>(after));
  EXPECT_EQ(std::get<tile::TiledContraction>(after).tileM, 16);
  auto [k256, shorter] = scheduleOfLongestProduct("x=1x256x32", enabled);
  EXPECT_EQ(k256, 256);
  EXPECT_FALSE(std::holds_alternative<tile::TiledContraction>(shorter));
}

TEST(TiledContractionRule, SmallProductsKeepTheirSchedule) {
  // 16 tokens: at most a few 16x16 tiles per product, far below one wave of blocks.
  PipelineOptions enabled;
  enabled.enable = {"tile-tiled-contractions"};
  Compiled c = compileModel(test::fixturePath("llama_tiny"), {}, enabled, "tile");
  for (auto& s : c.tileIR.schedules) EXPECT_FALSE(std::holds_alternative<tile::TiledContraction>(s));
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Tensor cores: every product of a bf16/f16 model, tiled whatever its size, moved onto mma.sync, then the
// operand fusion. Tensor cores round their operands to the model's type, which is what storing them did, so the
// result must equal the Loop-IR interpreter's on the program before any tile-level change.
struct TensorCoreCase {
  std::string model;
  std::optional<DType> cast;
  std::vector<int64_t> tile;  // {tile_m, tile_n}; empty: the pass's choice (64 x 64 here)
};

struct OnTensorCores {
  Compiled c;
  kernel::Program kernelIR;
  int mmaKernels = 0;
};

OnTensorCores onTensorCores(const TensorCoreCase& tc, Slices slices = {}) {
  OnTensorCores t;
  t.c = compileModel(test::fixturePath(tc.model), {}, unrefined(), "tile", tc.cast);
  tile::tileContractions(t.c.tileIR, /*minTiles=*/1);
  for (auto& s : t.c.tileIR.schedules)
    if (auto* tiled = std::get_if<tile::TiledContraction>(&s); tiled && !tc.tile.empty()) {
      tiled->tileM = tc.tile[0];
      tiled->tileN = tc.tile[1];
    }
  tile::tensorCoreContractions(t.c.tileIR);
  tile::fuseOperandProducers(t.c.tileIR);
  applySlices(t.c.tileIR, slices);
  tile::verify(t.c.tileIR);
  for (auto& s : t.c.tileIR.schedules) t.mmaKernels += tile::scheduledTensorCoreType(s).has_value();
  t.kernelIR = kernel::lowerFromTile(t.c.tileIR);
  kernel::verify(t.kernelIR);
  return t;
}

class TensorCores : public ::testing::TestWithParam<TensorCoreCase> {};

TEST_P(TensorCores, KernelInterpreterMatchesTheUntiledLoopProgram) {
  OnTensorCores t = onTensorCores(GetParam());
  EXPECT_GE(t.mmaKernels, 5) << "per layer at least q/k/v, q·kᵀ, p·v, o, gate/up and down should use tensor cores";
  auto inputs = test::randomInputs(t.kernelIR, 3);
  auto got = kernel::interpret(t.kernelIR, inputs);
  auto want = loop::interpret(t.c.loopIR, inputs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    Comparison cmp = compare(got[i], want[i]);
    EXPECT_LE(cmp.relL2, 1e-6) << GetParam().model << " output " << i;
    EXPECT_TRUE(allFinite(got[i]));
  }
}

// With deeper slices each staged slice feeds tile_k / 16 mma k-steps; prefetched or not, with the fragments read as
// pairs from bf16/f16 slices or not, in 128 x 128 tiles (warps of 64 x 64) or not: same k order, same rounding of
// A and B, same result.
TEST_P(TensorCores, DeeperPrefetchedAndPairedSlicesMatchTheUntiledLoopProgram) {
  for (const Slices& slices : kTensorCoreSliceVariants) {
    OnTensorCores t = onTensorCores(GetParam(), slices);
    int changed = 0;
    for (auto& s : t.c.tileIR.schedules)
      if (auto* tc = std::get_if<tile::TiledContraction>(&s); tc && tile::scheduledTensorCoreType(s))
        changed += slices.async      ? tc->a.copy == tile::TiledContraction::Copy::CpAsync
                   : slices.deep     ? tc->tileK > 16
                   : slices.prefetch ? tc->a.copy == tile::TiledContraction::Copy::RegisterPrefetch
                                     : tc->a.layout == tile::TiledContraction::SharedLayout::RowPairs;
    EXPECT_GT(changed, 0) << GetParam().model << " " << slices.name();
    auto inputs = test::randomInputs(t.kernelIR, 4);
    auto got = kernel::interpret(t.kernelIR, inputs);
    auto want = loop::interpret(t.c.loopIR, inputs);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_LE(compare(got[i], want[i]).relL2, 1e-6) << GetParam().model << " " << slices.name() << " output " << i;
    expectNvccCompiles(t.kernelIR);
  }
}

// tile-shape-products' rewrite: each single-stage product split into partial products over halves of the
// reduction and a kernel adding them (then pipelined like any product), in each tile shape: the result of the
// untiled Loop program, up to the order of the f32 sums.
TEST_P(TensorCores, SplitReductionsMatchTheUntiledLoopProgram) {
  for (tile::ProductShape shape : {tile::ProductShape{32, 32, 2}, tile::ProductShape{64, 32, 2}, tile::ProductShape{32, 64, 4},
                                   tile::ProductShape{128, 64, 1}}) {
    OnTensorCores t;
    t.c = compileModel(test::fixturePath(GetParam().model), {}, unrefined(), "tile", GetParam().cast);
    tile::tileContractions(t.c.tileIR, /*minTiles=*/1);
    tile::tensorCoreContractions(t.c.tileIR);
    tile::fuseOperandProducers(t.c.tileIR);
    const size_t before = t.c.tileIR.loop.kernels.size();
    tile::shapeProducts(t.c.tileIR, &shape);
    if (shape.split > 1) EXPECT_GT(t.c.tileIR.loop.kernels.size(), before) << "some product should have been split";
    // The kernel after each partial product adds the partials as a written-out sum: a pointwise map, no reduction.
    for (size_t i = 0; i + 1 < t.c.tileIR.loop.kernels.size(); ++i)
      if (t.c.tileIR.loop.kernels[i].name.ends_with("_split")) {
        EXPECT_TRUE(t.c.tileIR.loop.kernels[i + 1].stages.empty()) << t.c.tileIR.loop.kernels[i + 1].name;
        EXPECT_TRUE(std::holds_alternative<tile::PointwiseMap>(t.c.tileIR.schedules[i + 1]));
      }
    applySlices(t.c.tileIR, Slices{true, false, true, true});
    tile::verify(t.c.tileIR);
    t.kernelIR = kernel::lowerFromTile(t.c.tileIR);
    kernel::verify(t.kernelIR);
    auto inputs = test::randomInputs(t.kernelIR, 5);
    auto got = kernel::interpret(t.kernelIR, inputs);
    auto want = loop::interpret(t.c.loopIR, inputs);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      // The f32 partial sums add in another order, so a result may round to the neighbouring bf16/f16 value and
      // the difference propagate through the layers (an indexing error would be of order 1).
      EXPECT_LE(compare(got[i], want[i]).relL2, 1e-3) << GetParam().model << " split " << shape.split << " output " << i;
    if (shape.split == 2 && shape.tileM == 32) expectNvccCompiles(t.kernelIR);
  }
}

TEST_P(TensorCores, NvccCompilesTheMmaKernels) {
  OnTensorCores t = onTensorCores(GetParam());
  expectNvccCompiles(t.kernelIR);
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, TensorCores,
    ::testing::Values(TensorCoreCase{"hf_llama_tiny_bf16", std::nullopt, {}}, TensorCoreCase{"llama_tiny", DType::BF16, {}},
                      TensorCoreCase{"llama_tiny", DType::F16, {}}, TensorCoreCase{"llama_tiny", DType::BF16, {32, 32}},
                      TensorCoreCase{"llama_tiny", DType::F16, {32, 64}}),
    [](const ::testing::TestParamInfo<TensorCoreCase>& info) {
      std::string name = info.param.model + "_" + (info.param.cast ? std::string(dtypeName(*info.param.cast)) : "native");
      for (int64_t t : info.param.tile) name += "_" + std::to_string(t);
      return name;
    });

TEST(TensorCoreRule, F32ProductsStayOnCudaCores) {
  OnTensorCores t = onTensorCores({"llama_tiny", std::nullopt, {}});
  EXPECT_EQ(t.mmaKernels, 0);
}

// The fragment layout of kernel::mma covers each tile element exactly once across the 32 lanes.
TEST(TensorCoreRule, FragmentLayoutCoversEveryElementOnce) {
  std::set<std::pair<int, int>> a, b, c;
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i) a.insert(kernel::mmaElementA(lane, i));
    for (int i = 0; i < 4; ++i) {
      b.insert(kernel::mmaElementB(lane, i));
      c.insert(kernel::mmaElementC(lane, i));
    }
  }
  EXPECT_EQ(a.size(), 16u * 16u);
  EXPECT_EQ(b.size(), 16u * 8u);
  EXPECT_EQ(c.size(), 16u * 8u);
  EXPECT_EQ(kernel::mmaElementA(5, 6), std::make_pair(1 + 8, 2 + 8));  // lane 5: g = 1, t = 1; a6: row g+8, col 2t+8
  EXPECT_EQ(kernel::mmaElementB(5, 3), std::make_pair(2 + 1 + 8, 1));  // b3: row 2t+1+8, col g
  EXPECT_EQ(kernel::mmaElementC(5, 2), std::make_pair(1 + 8, 2));      // c2: row g+8, col 2t
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// tile-cooperative-reduce gives a block to each output of a kernel with few outputs and long reductions, but leaves matrix
// products (16 or more rows and columns, a reduction of 512 or more) to the tiled schedules: mlp_bf16_wide's down product
// (64 x 192 outputs, 512 deep) is a wgmma product; its gate/up product (192 deep) is not tiled.
TEST(CooperativeReduce, LeavesLongMatrixProductsToTheTiledSchedules) {
  Compiled c = compileModel(test::fixturePath("mlp_bf16_wide"), {}, PipelineOptions{}, "tile");
  ASSERT_EQ(c.tileIR.schedules.size(), 2u);
  EXPECT_FALSE(std::holds_alternative<tile::TiledContraction>(c.tileIR.schedules[0]));
  ASSERT_TRUE(std::holds_alternative<tile::TiledContraction>(c.tileIR.schedules[1]));
  PipelineOptions off;
  off.disable = {"tile-tile-long-reductions"};
  Compiled plain = compileModel(test::fixturePath("mlp_bf16_wide"), {}, off, "tile");
  EXPECT_FALSE(std::holds_alternative<tile::TiledContraction>(plain.tileIR.schedules[1]))
      << "left by tile-cooperative-reduce, tiled by tile-tile-long-reductions";
}

}  // namespace
}  // namespace kiln
