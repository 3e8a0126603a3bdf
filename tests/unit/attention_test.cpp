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
#include "attention_support.h"
#include "test_support.h"

namespace kiln {
namespace {
using namespace attention_test;  // NOLINT(google-build-using-namespace): the attention tests' shared helpers

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
  EXPECT_TRUE(allFinite(got[1]));
}

// ---- the flash_attention schedule and its lowering ----


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
  ASSERT_TRUE(allFinite(want[0]));
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
