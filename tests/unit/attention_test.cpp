// Attention as one kernel (issue 13): loop-mask-predicates turns constant masks into index comparisons,
// loop-fuse-attention forms the OnlineSoftmax kernel, tile-lower-from-loop gives it the flash_attention schedule with the
// key bounds of its mask, and kernel-lower-from-tile carries that out (checked by the interpreters; the fixture
// models/fixtures/attention_bf16.pt: causal sdpa and a sliding-window eager chain, grouped-query, 100 tokens).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <functional>
#include <limits>

#include "kiln/driver/pipeline.h"
#include "kiln/kernel/lower.h"
#include "kiln/loop/attention.h"
#include "kiln/support/error.h"
#include "kiln/tile/layout.h"
#include "test_support.h"

namespace kiln {
namespace {

Compiled compiled(const std::string& model, const std::string& level, std::vector<std::string> disable = {},
                  std::vector<std::string> enable = {}) {
  PipelineOptions o;
  o.disable.insert(disable.begin(), disable.end());
  o.enable.insert(enable.begin(), enable.end());
  return compileModel(test::fixturePath(model), {}, o, level);
}

std::vector<const loop::Kernel*> attentionKernels(const loop::Program& p) {
  std::vector<const loop::Kernel*> ks;
  for (const loop::Kernel& k : p.kernels)
    if (k.attention) ks.push_back(&k);
  return ks;
}

// ---- loop-mask-predicates ----

// A one-kernel program adding a constant [rows x cols] weight to an input of the same shape.
loop::Program addWeight(std::vector<float> w, int64_t rows, int64_t cols) {
  loop::Program p;
  p.modelName = "mask";
  auto data = std::make_shared<torch::WeightData>(torch::WeightData{"mask", std::move(w)});
  p.buffers = {loop::Buffer{loop::Buffer::Kind::Input, "x", DType::F32, {rows, cols}, nullptr},
               loop::Buffer{loop::Buffer::Kind::Weight, "mask", DType::F32, {rows, cols}, data},
               loop::Buffer{loop::Buffer::Kind::Output, "out", DType::F32, {rows, cols}, nullptr}};
  p.inputs = {0};
  p.outputs = {2};
  loop::Kernel k;
  k.name = "k0_add";
  k.output = 2;
  k.parallel = {loop::Axis{0, "p0", rows}, loop::Axis{1, "p1", cols}};
  k.rowAxes = 2;
  std::vector<Idx> at{idxVar(0, "p0"), idxVar(1, "p1")};
  k.result = loop::apply(tensor::Fn::Add, {loop::load(0, at), loop::load(1, at)});
  p.kernels.push_back(k);
  return p;
}

std::vector<float> band(int64_t rows, int64_t cols, int64_t lo, int64_t hi, float masked) {
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (int64_t x = 0; x < rows; ++x)
    for (int64_t y = 0; y < cols; ++y) w[static_cast<size_t>(x * cols + y)] = y >= x + lo && y < x + hi ? 0.f : masked;
  return w;
}

bool readsBuffer(const loop::Program& p, int buffer) {
  bool reads = false;
  for (const loop::Kernel& k : p.kernels) loop::forEachKernelRead(k, [&](int b, bool) { reads = reads || b == buffer; });
  return reads;
}

TEST(MaskPredicates, BandMasksBecomeComparisonsWithTheSameValues) {
  const float lowest = std::numeric_limits<float>::lowest(), inf = std::numeric_limits<float>::infinity();
  struct Case {
    const char* what;
    std::vector<float> w;
  };
  const int64_t rows = 6, cols = 9;  // three keys before the first query (a cache of 3)
  for (const Case& c : {Case{"causal, -inf", band(rows, cols, -100, 4, -inf)}, Case{"window of 3, lowest", band(rows, cols, 1, 4, lowest)},
                        Case{"zeros", std::vector<float>(rows * cols, 0.f)}}) {
    SCOPED_TRACE(c.what);
    loop::Program p = addWeight(c.w, rows, cols);
    auto inputs = test::randomInputs(p, 1);
    auto before = loop::interpret(p, inputs);
    ASSERT_TRUE(loop::maskPredicates(p));
    loop::verify(p);
    EXPECT_FALSE(readsBuffer(p, 1)) << loop::print(p);
    auto after = loop::interpret(p, inputs);
    for (size_t i = 0; i < before[0].values.size(); ++i) EXPECT_EQ(before[0].values[i], after[0].values[i]) << i;
    EXPECT_FALSE(loop::maskPredicates(p)) << "a second run finds nothing";
  }
}

TEST(MaskPredicates, OtherConstantsStayLoads) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> hole = band(4, 4, -100, 1, -inf);
  hole[13] = -inf;  // row 3 sees keys 0, 2 and 3: not one run
  std::vector<float> small = band(4, 4, -100, 1, -1e4f);  // -1e4 is not "masked" (exp of it minus a max can be > 0)
  std::vector<float> empty = band(4, 4, -100, 1, -inf);
  for (int y = 0; y < 4; ++y) empty[static_cast<size_t>(y)] = -inf;  // row 0 sees nothing
  std::vector<float> weights = band(4, 4, -100, 1, -inf);
  weights[0] = 0.5f;
  for (const auto& w : {hole, small, empty, weights}) {
    loop::Program p = addWeight(w, 4, 4);
    EXPECT_FALSE(loop::maskPredicates(p)) << loop::print(p);
    EXPECT_TRUE(readsBuffer(p, 1));
  }
}

// ---- loop-fuse-attention ----

TEST(FuseAttention, EachAttentionBecomesOneKernel) {
  Compiled c = compiled("attention_bf16", "loop");
  auto ks = attentionKernels(c.loopIR);
  ASSERT_EQ(ks.size(), 2u) << loop::print(c.loopIR);
  EXPECT_EQ(c.loopIR.kernels.size(), 2u) << "nothing but the two attentions is left:\n" << loop::print(c.loopIR);
  for (const loop::Kernel* k : ks) {
    auto o = loop::flashAttentionOperands(c.loopIR, *k);
    ASSERT_TRUE(o);
    EXPECT_EQ(o->depth, 64);
    EXPECT_EQ(o->width, 64);
    EXPECT_EQ(k->parallel[static_cast<size_t>(o->queryAxis)].extent, 100);
    EXPECT_EQ(k->attention->key.extent, 100);
  }
  // sdpa(is_causal): keys up to the query's own; the window: the 40 keys ending there.
  loop::KeyBounds causal = loop::keyBounds(*ks[0], loop::flashAttentionOperands(c.loopIR, *ks[0])->queryAxis);
  EXPECT_FALSE(causal.from);
  EXPECT_EQ(causal.to, 1);
  loop::KeyBounds window = loop::keyBounds(*ks[1], loop::flashAttentionOperands(c.loopIR, *ks[1])->queryAxis);
  EXPECT_EQ(window.from, -39);
  EXPECT_EQ(window.to, 1);
  // One attention kernel per decoder layer of the bf16 Llama.
  Compiled llama = compiled("hf_llama_tiny_bf16", "loop");
  EXPECT_EQ(attentionKernels(llama.loopIR).size(), 2u) << loop::print(llama.loopIR);
}

// Two families' own forms: GPT-NeoX adds its bias to v (the bias leaves the weighted sum for the result, the weights
// summing to 1); Gemma-2's eager path softcaps the scores, windows layer 0 and writes p·v with an extent-1 axis after the
// width.
TEST(FuseAttention, FamiliesOwnFormsAreOneKernel) {
  Compiled neox = compiled("hf_gpt_neox_tiny_bf16", "loop");
  auto ks = attentionKernels(neox.loopIR);
  ASSERT_EQ(ks.size(), 2u) << loop::print(neox.loopIR);
  auto o = loop::flashAttentionOperands(neox.loopIR, *ks[0]);
  ASSERT_TRUE(o);
  EXPECT_EQ(o->v, ks[0]->attention->value.get()) << "v is a plain load; its bias moved to the result";
  bool resultReadsBias = false;
  loop::forEachLoad(ks[0]->result, [&](const loop::Expr& l) {
    resultReadsBias = resultReadsBias || neox.loopIR.buffers[static_cast<size_t>(l.buffer)].name.find("query_key_value.bias") != std::string::npos;
  });
  EXPECT_TRUE(resultReadsBias) << loop::printKernelBody(neox.loopIR, *ks[0]);

  Compiled gemma2 = compiled("hf_gemma2_tiny_bf16", "loop");
  ks = attentionKernels(gemma2.loopIR);
  ASSERT_EQ(ks.size(), 2u) << loop::print(gemma2.loopIR);
  EXPECT_EQ(ks[0]->parallel.size(), 5u);
  EXPECT_EQ(ks[0]->rowAxes, 3) << "rows b, h, i; width e; then the extent-1 axis";
  const int query = loop::flashAttentionOperands(gemma2.loopIR, *ks[0])->queryAxis;
  EXPECT_EQ(loop::keyBounds(*ks[0], query).from, -7) << "sliding window of 8 in layer 0";
  EXPECT_FALSE(loop::keyBounds(*ks[1], query).from);
  bool softcapped = false;
  std::function<void(const loop::ExprP&)> find = [&](const loop::ExprP& e) {
    softcapped = softcapped || (e->kind == loop::Expr::Kind::Apply && e->fn == tensor::Fn::Tanh);
    for (auto& a : e->args) find(a);
  };
  find(ks[0]->attention->score);
  EXPECT_TRUE(softcapped) << loop::printKernelBody(gemma2.loopIR, *ks[0]);
}

// f32 attention is one kernel too (its flash schedule runs on CUDA cores); --explain-fusion has nothing to explain.
TEST(FuseAttention, F32AttentionIsOneKernel) {
  for (auto [model, count] : {std::pair{"attention", 1u}, {"attention_f32", 2u}, {"hf_llama_tiny", 2u}}) {
    Compiled c = compiled(model, "loop");
    EXPECT_EQ(attentionKernels(c.loopIR).size(), count) << model;
    EXPECT_EQ(loop::explainFusion(c.loopIR).find("not one kernel"), std::string::npos) << model;
    auto o = loop::flashAttentionOperands(c.loopIR, *attentionKernels(c.loopIR)[0]);
    ASSERT_TRUE(o);
    EXPECT_EQ(o->type, DType::F32);
  }
}

// The fused kernel computes what the three did, less the roundings of what they stored in bf16: the scores (both) and
// the probabilities (the eager chain's window).
TEST(FuseAttention, LoopInterpreterMatchesTheUnfusedProgram) {
  Compiled fused = compiled("attention_bf16", "loop");
  Compiled unfused = compiled("attention_bf16", "loop", {"loop-fuse-attention"});
  ASSERT_TRUE(attentionKernels(unfused.loopIR).empty());
  auto inputs = test::randomInputs(fused.loopIR, 2);
  auto got = loop::interpret(fused.loopIR, inputs), want = loop::interpret(unfused.loopIR, inputs);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_LE(compare(got[0], want[0]).relL2, 1e-2);
  EXPECT_LE(compare(got[1], want[1]).relL2, 1e-2);
  EXPECT_FALSE(compare(got[1], want[1]).hasNaN);
}

// ---- the flash_attention schedule and its lowering ----

// The kernels agree with the Loop IR to bf16 precision: they round the probabilities to bf16 for the tensor cores
// (relative to the running maximum), the Loop IR weights in f32.
void expectMatches(const std::vector<HostTensor>& got, const std::vector<HostTensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    Comparison cmp = compare(got[i], want[i]);
    EXPECT_LE(cmp.relL2, 1e-2) << "output " << i;
    EXPECT_FALSE(cmp.hasNaN) << "output " << i;
  }
}

// Schedule t verified, lowered, verified and run by the Kernel-IR interpreter.
std::vector<HostTensor> runSchedules(const tile::Program& t, const std::vector<HostTensor>& inputs) {
  tile::verify(t);
  kernel::Program kp = kernel::lowerFromTile(t);
  kernel::verify(kp);
  return kernel::interpret(kp, inputs);
}

TEST(FlashAttention, ScheduleCarriesTheMaskBounds) {
  Compiled c = compiled("attention_bf16", "tile");
  ASSERT_EQ(c.tileIR.schedules.size(), 2u);
  auto* causal = std::get_if<tile::FlashAttention>(&c.tileIR.schedules[0]);
  auto* window = std::get_if<tile::FlashAttention>(&c.tileIR.schedules[1]);
  ASSERT_TRUE(causal && window) << tile::print(c.tileIR);
  EXPECT_EQ(causal->keyTo, 1);
  EXPECT_FALSE(causal->keyFrom);
  EXPECT_EQ(window->keyFrom, -39);
  // 8 heads x 100 queries: even blocks of 16 queries make fewer than two blocks per SM; 2 steps of keys: no split.
  EXPECT_EQ(causal->blockQ, 16);
  EXPECT_EQ(causal->keySplit, 1);
  const loop::Kernel& k = c.tileIR.loop.kernels[0];
  EXPECT_EQ(tile::threadsPerBlock(*causal), 32);
  // tile-balance-attention: 7 query blocks per head under a causal mask, but on tensor cores: unpaired (interleaved).
  EXPECT_FALSE(causal->pairBlocks || window->pairBlocks);
  EXPECT_EQ(tile::gridBlocks(*causal, k), 8 * 7);
  tile::FlashAttention paired = *causal;
  paired.pairBlocks = true;
  EXPECT_EQ(tile::gridBlocks(paired, k), 8 * 4) << "8 heads x 4 pairs of blocks of 16 queries: (6, 0), (5, 1), (4, 2), (3)";
  // At head dim 128 too (2 query heads, 80 tokens: 5 query blocks of 16); f32 on CUDA cores pairs at any head dim.
  Compiled deep = compiled("attention_bf16_deep", "tile");
  EXPECT_FALSE(std::get<tile::FlashAttention>(deep.tileIR.schedules[0]).pairBlocks);
  EXPECT_TRUE(std::get<tile::FlashAttention>(deep.tileIR.schedules[0]).rowsInner);
  EXPECT_TRUE(std::get<tile::FlashAttention>(compiled("attention_f32", "tile").tileIR.schedules[0]).pairBlocks);
  EXPECT_TRUE(tile::dynamicShared(*causal));
  EXPECT_EQ(tile::sharedBytes(*causal, k), (16 * 72 + 2 * (64 * 72 + 64 * 72)) * 2);
  EXPECT_NE(tile::print(c.tileIR).find("flash_attention query p2 (7 blocks of 16), keys 100 in steps of 64, from query + -39"),
            std::string::npos)
      << tile::print(c.tileIR);
  // Warps splitting the keys hand over 4 + width / 2 f32 values per thread.
  tile::FlashAttention split = *causal;
  split.blockQ = 32;
  split.keySplit = 4;
  EXPECT_EQ(tile::threadsPerBlock(split), 256);
  EXPECT_EQ(tile::sharedBytes(split, k), (32 * 72 + 2 * (64 * 72 + 64 * 72)) * 2 + 3 * 64 * (4 + 32) * 4);
}

// Every block size, key split, pairing and ring depth the schedule allows, on both attentions of the fixture (causal and
// windowed, 100 tokens: partial last blocks and steps; 7, 4 or 2 query blocks, so an odd count pairs its middle block
// with itself), by the Kernel-IR interpreter against the Loop IR.
TEST(FlashAttention, EveryBlockAndSplitMatchesTheLoopInterpreter) {
  Compiled c = compiled("attention_bf16", "tile");
  ASSERT_EQ(std::get<tile::FlashAttention>(c.tileIR.schedules[0]).ring, 2) << "two steps of keys: no deeper ring";
  auto inputs = test::randomInputs(c.loopIR, 5);
  auto want = loop::interpret(c.loopIR, inputs);
  for (int64_t rows : {16, 32, 64})
    for (int64_t split : {1, 2, 4})
      for (bool paired : {false, true})
        for (int64_t ring : {2, 3, 4})
          for (bool ahead : {false, true}) {
            if (ring != 2 && (split != 1 || rows == 32)) continue;  // rings are independent of the split and block: fewer runs
            if (ahead && (split != 1 || ring != 2)) continue;       // scores a step ahead: no key split, two slots
            SCOPED_TRACE(fmt::format("block_q {} key_split {} paired {} ring {} scores ahead {}", rows, split, paired, ring, ahead));
            tile::Program t = c.tileIR;
            for (auto& s : t.schedules) {
              std::get<tile::FlashAttention>(s).ring = ring;
              std::get<tile::FlashAttention>(s).blockQ = rows;
              std::get<tile::FlashAttention>(s).keySplit = split;
              std::get<tile::FlashAttention>(s).pairBlocks = paired;
              std::get<tile::FlashAttention>(s).scoresAhead = ahead;
            }
            expectMatches(runSchedules(t, inputs), want);
          }
}

// Four steps of keys (200, the last step partial): copies two steps ahead by default; every ring depth, paired or not.
TEST(FlashAttention, DeeperRingsMatchTheLoopInterpreter) {
  Compiled c = compiled("attention_bf16_long", "tile");
  ASSERT_EQ(c.tileIR.schedules.size(), 1u);
  EXPECT_EQ(std::get<tile::FlashAttention>(c.tileIR.schedules[0]).ring, 3);
  auto inputs = test::randomInputs(c.loopIR, 6);
  auto want = loop::interpret(c.loopIR, inputs);
  for (int64_t ring : {2, 3, 4})
    for (bool paired : {false, true}) {
      SCOPED_TRACE(fmt::format("ring {} paired {}", ring, paired));
      tile::Program t = c.tileIR;
      auto& f = std::get<tile::FlashAttention>(t.schedules[0]);
      f.ring = ring;
      f.pairBlocks = paired;
      f.blockQ = 64;
      f.scoresAhead = ring == 2;
      expectMatches(runSchedules(t, inputs), want);
    }
}

// Warps of two row groups (warp_rows 32, which no pass chooses since it measured slower): tensor cores only, no key split,
// at most 4 warps of rows; the 512-token schedule keeps warps of 16 rows.
TEST(FlashAttention, WarpsOfTwoRowGroupsAreCheckedByTheVerifier) {
  Compiled c = compiled("attention_bf16_512", "tile");
  EXPECT_EQ(std::get<tile::FlashAttention>(c.tileIR.schedules[0]).warpRows, 16);
  tile::Program wide = c.tileIR;
  auto& f = std::get<tile::FlashAttention>(wide.schedules[0]);
  f.warpRows = 32;
  f.blockQ = 128;
  f.scoresByWgmma = false;
  EXPECT_EQ(tile::threadsPerBlock(f), 128) << "4 warps of 32 rows";
  tile::verify(wide);
  EXPECT_NE(tile::print(wide).find("mma.sync.bf16 warps 4 of 32 rows"), std::string::npos) << tile::print(wide);
  tile::Program bad = wide;
  std::get<tile::FlashAttention>(bad.schedules[0]).keySplit = 2;
  EXPECT_THROW(tile::verify(bad), InternalError);
  bad = wide;
  std::get<tile::FlashAttention>(bad.schedules[0]).warpRows = 64;
  EXPECT_THROW(tile::verify(bad), InternalError);
}

// Warps of two row groups: every block size, pairing and ring depth, against the Loop IR: head dim 64 and 16 (q's
// fragments held for the whole walk) and 128 (loaded again at every step).
TEST(FlashAttention, TwoRowGroupsPerWarpMatchTheLoopInterpreter) {
  for (const char* model : {"attention_bf16", "attention_bf16_long", "attention_bf16_deep"}) {
    Compiled c = compiled(model, "tile");
    auto inputs = test::randomInputs(c.loopIR, 8);
    auto want = loop::interpret(c.loopIR, inputs);
    for (int64_t rows : {32, 64, 128})
      for (bool paired : {false, true})
        for (int64_t ring : {2, 3}) {
          if (ring == 3 && rows != 64) continue;
          SCOPED_TRACE(fmt::format("{} block_q {} paired {} ring {}", model, rows, paired, ring));
          tile::Program t = c.tileIR;
          for (auto& s : t.schedules) {
            auto& f = std::get<tile::FlashAttention>(s);
            f.warpRows = 32;
            f.blockQ = rows;
            f.pairBlocks = paired;
            f.ring = ring;
            f.scoresAhead = ring == 2 && std::string(model) != "attention_bf16_deep";  // (deep: 260 accumulators)
            EXPECT_EQ(tile::flashQueriesResident(f, c.loopIR.kernels[0].attention->dot.axes[0].extent),
                      std::string(model) != "attention_bf16_deep");
          }
          expectMatches(runSchedules(t, inputs), want);
        }
  }
}

// tile-deepen-attention-steps and tile-interleave-attention-rows: 512 keys walk in steps of 128 (two ring slots keep two
// blocks per SM); 200 keys (fewer than 4 whole steps of 64) and 100 keep steps of 64; the causal grid lists heads inner.
TEST(FlashAttention, LongWalksTakeStepsOf128AndInterleaveTheirRows) {
  Compiled c = compiled("attention_bf16_512", "tile");
  const auto& f = std::get<tile::FlashAttention>(c.tileIR.schedules[0]);
  EXPECT_EQ(f.blockKV, 128);
  EXPECT_TRUE(f.rowsInner);
  EXPECT_LE(2 * tile::sharedBytes(f, c.tileIR.loop.kernels[0]), c.tileIR.target.sharedPerSm) << "two blocks per SM";
  EXPECT_NE(tile::print(c.tileIR).find("in steps of 128"), std::string::npos) << tile::print(c.tileIR);
  EXPECT_EQ(std::get<tile::FlashAttention>(compiled("attention_bf16_long", "tile").tileIR.schedules[0]).blockKV, 64);
  EXPECT_EQ(std::get<tile::FlashAttention>(compiled("attention_bf16", "tile").tileIR.schedules[0]).blockKV, 64);
  Compiled off = compiled("attention_bf16_512", "tile", {"tile-deepen-attention-steps", "tile-interleave-attention-rows"});
  EXPECT_EQ(std::get<tile::FlashAttention>(off.tileIR.schedules[0]).blockKV, 64);
  EXPECT_FALSE(std::get<tile::FlashAttention>(off.tileIR.schedules[0]).rowsInner);
  tile::Program bad = c.tileIR;
  std::get<tile::FlashAttention>(bad.schedules[0]).blockKV = 256;
  EXPECT_THROW(tile::verify(bad), InternalError);
  auto inputs = test::randomInputs(c.loopIR, 10);
  expectMatches(runSchedules(c.tileIR, inputs), loop::interpret(c.loopIR, inputs));
}

// tile-sum-attention-rows-by-mma: on for tensor cores (not f32) with rows at most 64 wide (not attention_bf16_deep's 128),
// and with it off the rows are summed by additions and shuffles; both against the Loop IR, with a key split (whose
// combine takes the sums) and two row groups per warp.
TEST(FlashAttention, RowSumsByMmaOrByAdditionsMatchTheLoopInterpreter) {
  Compiled c = compiled("attention_bf16", "tile");
  EXPECT_TRUE(std::get<tile::FlashAttention>(c.tileIR.schedules[0]).rowSumsByMma);
  EXPECT_FALSE(std::get<tile::FlashAttention>(compiled("attention_bf16_deep", "tile").tileIR.schedules[0]).rowSumsByMma);
  EXPECT_NE(tile::print(c.tileIR).find("row sums by mma"), std::string::npos);
  EXPECT_FALSE(std::get<tile::FlashAttention>(compiled("attention_f32", "tile").tileIR.schedules[0]).rowSumsByMma);
  auto inputs = test::randomInputs(c.loopIR, 12);
  auto want = loop::interpret(c.loopIR, inputs);
  for (bool byMma : {false, true})
    for (int64_t split : {1, 2})
      for (int64_t warpRows : {16, 32}) {
        if (split == 2 && warpRows == 32) continue;  // two row groups split no keys
        SCOPED_TRACE(fmt::format("row sums by mma {} key split {} warp rows {}", byMma, split, warpRows));
        tile::Program t = c.tileIR;
        for (auto& s : t.schedules) {
          auto& f = std::get<tile::FlashAttention>(s);
          f.rowSumsByMma = byMma;
          f.keySplit = split;
          f.warpRows = warpRows;
          f.blockQ = 64;
          f.scoresAhead = split == 1;
        }
        expectMatches(runSchedules(t, inputs), want);
      }
  tile::Program bad = compiled("attention_f32", "tile").tileIR;
  std::get<tile::FlashAttention>(bad.schedules[0]).rowSumsByMma = true;
  EXPECT_THROW(tile::verify(bad), InternalError);
}

// Steps of 128 keys and the interleaved grid at every block size, pairing and ring, against the Loop IR: 100 tokens (7, 4
// or 2 query blocks, a partial step, a window), 200, and head dim 128.
// Each variant's change to every attention schedule of `model`, run by the Kernel-IR interpreter against the Loop IR.
using Variant = std::pair<std::string, std::function<void(tile::FlashAttention&)>>;
void expectVariantsMatch(const char* model, int seed, const std::vector<Variant>& variants) {
  Compiled c = compiled(model, "tile");
  auto inputs = test::randomInputs(c.loopIR, seed);
  auto want = loop::interpret(c.loopIR, inputs);
  for (const auto& [name, change] : variants) {
    SCOPED_TRACE(fmt::format("{}: {}", model, name));
    tile::Program t = c.tileIR;
    for (auto& s : t.schedules) change(std::get<tile::FlashAttention>(s));
    expectMatches(runSchedules(t, inputs), want);
  }
}

TEST(FlashAttention, DeepStepsAndInterleavedRowsMatchTheLoopInterpreter) {
  std::vector<Variant> variants;
  for (int64_t rows : {16, 64})
    for (bool paired : {false, true})
      for (bool inner : {false, true})
        for (int64_t ring : {2, 3}) {
          if (ring == 3 && (rows != 64 || paired)) continue;
          variants.push_back({fmt::format("block_q {} paired {} rows inner {} ring {}", rows, paired, inner, ring),
                              [=](tile::FlashAttention& f) {
                                f.blockKV = 128;
                                f.blockQ = rows;
                                f.pairBlocks = paired;
                                f.rowsInner = inner;
                                f.ring = ring;
                                f.scoresAhead = ring == 2;
                              }});
        }
  for (const char* model : {"attention_bf16", "attention_bf16_long", "attention_bf16_deep"}) expectVariantsMatch(model, 11, variants);
}

// tile-attention-scores-ahead: on for tensor-core walks of two ring slots and more than one step (100 keys, head dims 64
// and 128), not for f32 or a deeper ring (200 and 512 keys of head dim 16: three slots); the verifier refuses it with a key
// split, a third slot, scores by wgmma or CUDA cores. The kernel multiplies the next step's scores before this step's softmax
// (a second set of score accumulators), and matches the Loop IR with and without it: at one step (the last, multiplying
// nothing ahead) up to the 16 steps of a 1000-key walk (attention_bf16_deep: head dim 128, q loaded at every step by two
// row groups).
TEST(FlashAttention, ScoresAStepAheadMatchTheLoopInterpreter) {
  Compiled c = compiled("attention_bf16", "tile");
  EXPECT_TRUE(std::get<tile::FlashAttention>(c.tileIR.schedules[0]).scoresAhead);
  EXPECT_TRUE(std::get<tile::FlashAttention>(compiled("attention_bf16_deep", "tile").tileIR.schedules[0]).scoresAhead);
  EXPECT_FALSE(std::get<tile::FlashAttention>(compiled("attention_bf16_512", "tile").tileIR.schedules[0]).scoresAhead);
  EXPECT_NE(tile::print(c.tileIR).find("; scores a step ahead"), std::string::npos) << tile::print(c.tileIR);
  EXPECT_FALSE(std::get<tile::FlashAttention>(compiled("attention_f32", "tile").tileIR.schedules[0]).scoresAhead);
  EXPECT_FALSE(std::get<tile::FlashAttention>(compiled("attention_bf16_long", "tile").tileIR.schedules[0]).scoresAhead) << "three slots";
  EXPECT_FALSE(std::get<tile::FlashAttention>(
                   compiled("attention_bf16", "tile", {"tile-attention-scores-ahead"}).tileIR.schedules[0]).scoresAhead);
  // Two sets of score accumulators in the generated kernel: the ahead set is multiplied inside the step loop.
  const std::string cuda = printLevel(compiled("attention_bf16", "cuda"), "cuda");
  EXPECT_NE(cuda.find("sa0_0 = 0.0f;"), std::string::npos);
  EXPECT_NE(cuda.find("s0_0 = sa0_0;"), std::string::npos);
  for (auto change : std::vector<std::function<void(tile::FlashAttention&)>>{
           [](tile::FlashAttention& f) { f.keySplit = 2; }, [](tile::FlashAttention& f) { f.ring = 3; }}) {
    tile::Program bad = c.tileIR;
    change(std::get<tile::FlashAttention>(bad.schedules[0]));
    EXPECT_THROW(tile::verify(bad), InternalError);
  }
  tile::Program byWgmma = compiled("attention_bf16_512", "tile", {}, {"tile-attention-scores-by-wgmma"}).tileIR;
  auto& w = std::get<tile::FlashAttention>(byWgmma.schedules[0]);
  ASSERT_TRUE(w.scoresByWgmma);
  w.ring = 2;
  tile::verify(byWgmma);
  w.scoresAhead = true;
  EXPECT_NO_THROW(tile::verify(byWgmma)) << "the next step's wgmma group issued before the softmax";
  w.scoresAhead = false;
  EXPECT_TRUE(tile::attentionScoresAhead(byWgmma) && w.scoresAhead) << "the rule takes wgmma scores too";
  tile::Program f32 = compiled("attention_f32", "tile").tileIR;
  std::get<tile::FlashAttention>(f32.schedules[0]).scoresAhead = true;
  EXPECT_THROW(tile::verify(f32), InternalError);
  std::vector<Variant> variants;
  for (bool ahead : {false, true})
    for (int64_t keys : {64, 128})
      variants.push_back({fmt::format("scores ahead {} block_kv {}", ahead, keys), [=](tile::FlashAttention& f) {
                            f.ring = 2;
                            f.blockKV = keys;
                            f.scoresAhead = ahead;
                          }});
  for (const char* model : {"attention_bf16", "attention_bf16_long", "attention_bf16_deep"}) expectVariantsMatch(model, 13, variants);
}

// tile-attention-scores-by-wgmma (off by default: slower on the H200 as it stands, docs/pipeline.md): on sm_90a for blocks of one warpgroup (64 rows of 16-row warps), not for smaller blocks
// or other targets; the scores by wgmma (q and k as core matrices) at both step depths, paired or interleaved, two and
// three ring slots, row sums by mma or not, a step ahead (the next step's group issued before the softmax) or not, at
// head dims 64 and 128 (_deep), against the Loop IR.
TEST(FlashAttention, ScoresByWgmmaMatchTheLoopInterpreter) {
  const std::vector<std::string> wgmma = {"tile-attention-scores-by-wgmma"};  // off by default: slower as it stands
  EXPECT_FALSE(std::get<tile::FlashAttention>(compiled("attention_bf16_512", "tile").tileIR.schedules[0]).scoresByWgmma);
  EXPECT_TRUE(std::get<tile::FlashAttention>(compiled("attention_bf16_512", "tile", {}, wgmma).tileIR.schedules[0]).scoresByWgmma);
  EXPECT_FALSE(std::get<tile::FlashAttention>(compiled("attention_bf16", "tile", {}, wgmma).tileIR.schedules[0]).scoresByWgmma);
  PipelineOptions on;
  on.enable.insert(wgmma.begin(), wgmma.end());
  Compiled ampere = compileModel(test::fixturePath("attention_bf16_512"), {}, on, "tile", std::nullopt, targetFor("sm_80"));
  EXPECT_FALSE(std::get<tile::FlashAttention>(ampere.tileIR.schedules[0]).scoresByWgmma);
  std::vector<Variant> variants;
  for (int64_t keys : {64, 128})
    for (bool paired : {false, true})
      for (int64_t ring : {2, 3})
        for (bool sums : {true, false})
          for (bool ahead : {false, true}) {
          if ((ring == 3 && paired) || (!sums && (keys != 128 || ring != 2)) || (ahead && ring != 2)) continue;
          variants.push_back({fmt::format("block_kv {} paired {} ring {} row sums by mma {} scores ahead {}", keys, paired, ring,
                                          sums, ahead),
                              [=](tile::FlashAttention& f) {
                                f.blockQ = 64;
                                f.warpRows = 16;
                                f.keySplit = 1;
                                f.blockKV = keys;
                                f.pairBlocks = paired;
                                f.rowsInner = !paired;
                                f.ring = ring;
                                f.rowSumsByMma = sums;
                                f.scoresByWgmma = true;
                                f.scoresAhead = ahead;
                              }});
          }
  for (const char* model : {"attention_bf16", "attention_bf16_long", "attention_bf16_deep"}) expectVariantsMatch(model, 12, variants);
  // The verifier: one warpgroup only.
  Compiled c = compiled("attention_bf16", "tile");
  tile::Program bad = c.tileIR;
  for (auto& s : bad.schedules) std::get<tile::FlashAttention>(s).scoresByWgmma = true;  // blocks of 16 rows
  std::string error;
  try {
    tile::verify(bad);
  } catch (const InternalError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("scores by wgmma need sm_90a"), std::string::npos) << error;
}

// A masked step takes the raw score inside the schedule's key bounds and -inf outside; a schedule without the bounds
// (as for a mask that leaves some row no key, which keyBounds refuses) takes the whole score, masks included, on every
// step, so the causal and windowed masks still hold, at 64-key and 128-key steps.
TEST(FlashAttention, MasksHoldWithAndWithoutTheKeyBounds) {
  std::vector<Variant> variants{{"bounds", [](tile::FlashAttention&) {}},
                                {"no bounds", [](tile::FlashAttention& f) { f.keyFrom = f.keyTo = std::nullopt; }},
                                {"no bounds, 128-key steps", [](tile::FlashAttention& f) {
                                   f.keyFrom = f.keyTo = std::nullopt;
                                   f.blockKV = 128;
                                 }}};
  expectVariantsMatch("attention_bf16", 12, variants);
  Compiled c = compiled("attention_bf16", "kernel");
  const std::string text = kernel::print(c.kernelIR);
  EXPECT_NE(text.find("select(kj0_0 < qi0 + 1, %s0_0, -inf)"), std::string::npos) << "the causal diagonal as a select";
}

// Masks read as weights (loop-mask-predicates off) in which rows 0 and 50 mask every key with float's lowest value:
// LibTorch's softmax gives such a row equal weights (every score the same), and so must the flash kernel, whose
// exponentials would otherwise overflow (the score times c log2 e) and leave the row NaN. The other rows as before.
TEST(FlashAttention, RowsWhoseEveryKeyIsMaskedWeighTheKeysAlike) {
  auto maskRows = [](loop::Program& p) {
    int masks = 0;
    for (loop::Buffer& b : p.buffers)
      if (b.kind == loop::Buffer::Kind::Weight && b.name.find("mask") != std::string::npos) {
        auto w = std::make_shared<torch::WeightData>(*b.weight);
        const int64_t cols = b.shape.back();
        for (int64_t row : {0, 50})
          for (int64_t j = 0; j < cols; ++j) w->values[static_cast<size_t>(row * cols + j)] = std::numeric_limits<float>::lowest();
        b.weight = w;
        ++masks;
      }
    return masks;
  };
  Compiled fused = compiled("attention_bf16", "tile", {"loop-mask-predicates"});
  Compiled unfused = compiled("attention_bf16", "loop", {"loop-mask-predicates", "loop-fuse-attention"});
  ASSERT_EQ(maskRows(fused.tileIR.loop), 2) << "the causal and the window mask, as weights";
  ASSERT_EQ(maskRows(unfused.loopIR), 2);
  ASSERT_TRUE(std::holds_alternative<tile::FlashAttention>(fused.tileIR.schedules[0]));
  auto inputs = test::randomInputs(fused.tileIR.loop, 13);
  auto want = loop::interpret(unfused.loopIR, inputs);
  ASSERT_FALSE(compare(want[0], want[0]).hasNaN);
  expectMatches(runSchedules(fused.tileIR, inputs), want);
}

TEST(FlashAttention, KernelInterpreterMatchesTheLoopInterpreter) {
  for (const char* model : {"attention_bf16", "hf_llama_tiny_bf16", "hf_gpt_neox_tiny_bf16", "hf_gemma2_tiny_bf16"}) {
    SCOPED_TRACE(model);
    Compiled c = compiled(model, "kernel");
    auto inputs = test::randomInputs(c.kernelIR, 4);
    expectMatches(kernel::interpret(c.kernelIR, inputs), loop::interpret(c.loopIR, inputs));
  }
}

// f32 on CUDA cores: 8 threads per query row of a block, a shared slice of probabilities; every block size, pairing, ring
// depth and key step (64, and 32 for head dims whose 64-key slices would not fit) against the Loop IR, at f32 precision.
TEST(FlashAttention, F32OnCudaCoresMatchesTheLoopInterpreter) {
  Compiled c = compiled("attention_f32", "tile");
  ASSERT_EQ(c.tileIR.schedules.size(), 2u);
  const auto& causal = std::get<tile::FlashAttention>(c.tileIR.schedules[0]);
  const loop::Kernel& k = c.tileIR.loop.kernels[0];
  EXPECT_TRUE(tile::flashOnCudaCores(causal));
  EXPECT_EQ(causal.blockQ, 16);
  EXPECT_EQ(causal.keyTo, 1);
  EXPECT_EQ(std::get<tile::FlashAttention>(c.tileIR.schedules[1]).keyFrom, -39);
  EXPECT_EQ(tile::threadsPerBlock(causal), 128);
  EXPECT_EQ(tile::sharedBytes(causal, k), (16 * 68 + 2 * (64 * 68 + 64 * 68) + 16 * 68) * 4);
  EXPECT_NE(tile::print(c.tileIR).find("ffma, 16 lanes per 2 rows"), std::string::npos) << tile::print(c.tileIR);
  auto inputs = test::randomInputs(c.loopIR, 7);
  auto want = loop::interpret(c.loopIR, inputs);
  for (int64_t rows : {16, 32, 64})
    for (int64_t keys : {64, 32})
      for (bool paired : {false, true})
        for (int64_t ring : {2, 3}) {
          if (ring == 3 && (rows != 16 || keys != 64)) continue;
          SCOPED_TRACE(fmt::format("block_q {} block_kv {} paired {} ring {}", rows, keys, paired, ring));
          tile::Program t = c.tileIR;
          for (auto& s : t.schedules) {
            auto& f = std::get<tile::FlashAttention>(s);
            f.blockQ = rows;
            f.blockKV = keys;
            f.pairBlocks = paired;
            f.ring = ring;
          }
          auto got = runSchedules(t, inputs);
          ASSERT_EQ(got.size(), want.size());
          for (size_t i = 0; i < got.size(); ++i) EXPECT_LE(compare(got[i], want[i]).relL2, 1e-5) << "output " << i;
        }
  tile::Program split = c.tileIR;
  std::get<tile::FlashAttention>(split.schedules[0]).keySplit = 2;
  EXPECT_THROW(tile::verify(split), InternalError) << "f32 splits no keys";
}

// The f32 families through the whole pipeline: head dims below 64 leave some lanes without a column chunk of v.
TEST(FlashAttention, F32FamiliesMatchTheLoopInterpreter) {
  for (const char* model : {"attention", "hf_llama_tiny", "hf_gpt_neox_tiny", "hf_gemma2_tiny", "hf_mistral_tiny"}) {
    SCOPED_TRACE(model);
    Compiled c = compiled(model, "kernel");
    EXPECT_FALSE(attentionKernels(c.loopIR).empty());
    auto inputs = test::randomInputs(c.kernelIR, 4);
    auto got = kernel::interpret(c.kernelIR, inputs), want = loop::interpret(c.loopIR, inputs);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_LE(compare(got[i], want[i]).relL2, 1e-5) << "output " << i;
  }
}

TEST(FlashAttention, VerifierRefusesMismatchedSchedules) {
  Compiled c = compiled("attention_bf16", "tile");
  tile::Program wrongStrategy = c.tileIR;
  wrongStrategy.schedules[0] = tile::PointwiseMap{};
  EXPECT_THROW(tile::verify(wrongStrategy), InternalError);
  tile::Program wrongBlock = c.tileIR;
  std::get<tile::FlashAttention>(wrongBlock.schedules[0]).blockQ = 128;
  EXPECT_THROW(tile::verify(wrongBlock), InternalError);
  tile::Program notAttention = compiled("mlp", "tile").tileIR;
  notAttention.schedules[0] = tile::FlashAttention{};
  EXPECT_THROW(tile::verify(notAttention), InternalError);
}

}  // namespace
}  // namespace kiln
