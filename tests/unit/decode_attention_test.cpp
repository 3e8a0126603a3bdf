// Decode attention reads keys only up to the run-time length (issue 42): loop-index-comparisons turns the decoder step's
// causal mask `kv_idx <= q_idx` (an arange over the cache against the positions the forward was given) into a select on
// the key's index, loop-fuse-attention makes the step's attention one kernel, and its flash schedule walks only the key
// steps below the block's largest run-time limit (loop::runtimeKeyLimit). The fixture hf_llama_decode_long.pt is the
// tiny Llama decoder step of models/hf_decode.py with a cache of 256 positions.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kiln/driver/pipeline.h"
#include "kiln/loop/attention.h"
#include "test_support.h"

namespace kiln {
namespace {

// ---- loop-index-comparisons ----

// out[p0, p1] = where(arange[0, p1] <= pos[p0], x[p0, p1], -1e30): a causal mask of run-time positions.
loop::Program maskedByPositions(tensor::Fn cmp, DType arangeType = DType::I64) {
  loop::Program p;
  p.modelName = "positions";
  std::vector<float> arange(8);
  for (size_t i = 0; i < arange.size(); ++i) arange[i] = static_cast<float>(i);
  auto data = std::make_shared<torch::WeightData>(torch::WeightData{"arange", arange});
  p.buffers = {loop::Buffer{loop::Buffer::Kind::Input, "pos", DType::I64, {4}, nullptr},
               loop::Buffer{loop::Buffer::Kind::Weight, "arange", arangeType, {1, 8}, data},
               loop::Buffer{loop::Buffer::Kind::Input, "x", DType::F32, {4, 8}, nullptr},
               loop::Buffer{loop::Buffer::Kind::Output, "out", DType::F32, {4, 8}, nullptr}};
  p.inputs = {0, 2};
  p.outputs = {3};
  loop::Kernel k;
  k.name = "k0_where";
  k.output = 3;
  const Idx p0 = idxVar(0, "p0"), p1 = idxVar(1, "p1");
  k.parallel = {loop::Axis{0, "p0", 4}, loop::Axis{1, "p1", 8}};
  k.rowAxes = 2;
  const loop::ExprP visible = loop::apply(cmp, {loop::load(1, {idxConst(0), p1}), loop::load(0, {p0})});
  k.result = loop::apply(tensor::Fn::Where, {visible, loop::load(2, {p0, p1}), loop::imm(-1e30f)});
  p.kernels.push_back(k);
  return p;
}

std::vector<HostTensor> positionsInputs() {
  return {HostTensor{DType::I64, {4}, {0.f, 3.f, 7.f, 5.f}}, randomTensor(DType::F32, {4, 8}, 1)};
}

TEST(IndexComparisons, AnArangeAgainstPositionsBecomesASelectOnTheKeysIndex) {
  for (tensor::Fn cmp : {tensor::Fn::Le, tensor::Fn::Lt, tensor::Fn::Gt, tensor::Fn::Ge}) {
    loop::Program p = maskedByPositions(cmp);
    const std::vector<HostTensor> before = loop::interpret(p, positionsInputs());
    ASSERT_TRUE(loop::indexComparisons(p)) << tensor::fnName(cmp);
    const std::string text = loop::print(p);
    EXPECT_EQ(text.find("load arange"), std::string::npos) << text;
    if (cmp == tensor::Fn::Le) EXPECT_NE(text.find("select(p1 < pos[p0] + 1, "), std::string::npos) << text;
    if (cmp == tensor::Fn::Gt) EXPECT_NE(text.find("select(pos[p0] < p1, "), std::string::npos) << text;
    const std::vector<HostTensor> after = loop::interpret(p, positionsInputs());
    EXPECT_EQ(after[0].values, before[0].values) << tensor::fnName(cmp);
    EXPECT_FALSE(loop::indexComparisons(p)) << "a second run changes nothing";
  }
}

TEST(IndexComparisons, LeavesFloatValuesAlone) {
  loop::Program floats = maskedByPositions(tensor::Fn::Le, DType::F32);  // a float arange: not known to be integers
  EXPECT_FALSE(loop::indexComparisons(floats)) << loop::print(floats);
}

// index_copy of one slice (a decoder step's cache write) is where(arange == position, new, old): equality is two selects,
// a < b keeping old and a < b + 1 the new value, and != the same with the two exchanged.
TEST(IndexComparisons, EqualityIsTwoSelects) {
  for (tensor::Fn cmp : {tensor::Fn::Eq, tensor::Fn::Ne}) {
    loop::Program p = maskedByPositions(cmp);
    const std::vector<HostTensor> before = loop::interpret(p, positionsInputs());
    ASSERT_TRUE(loop::indexComparisons(p)) << tensor::fnName(cmp);
    const std::string text = loop::print(p);
    EXPECT_EQ(text.find("load arange"), std::string::npos) << text;
    EXPECT_NE(text.find("select(p1 < pos[p0] + 1, "), std::string::npos) << text;
    EXPECT_NE(text.find("select(p1 < pos[p0], "), std::string::npos) << text;
    const std::vector<HostTensor> after = loop::interpret(p, positionsInputs());
    EXPECT_EQ(after[0].values, before[0].values) << tensor::fnName(cmp);
    const int hits = static_cast<int>(std::count(after[0].values.begin(), after[0].values.end(), -1e30f));
    EXPECT_EQ(hits, cmp == tensor::Fn::Eq ? 32 - 4 : 4) << "one key per row equals its position";
  }
}

// A decoder step computes the index it compares with: `position + 0` (transformers' cache_position arithmetic) into a
// temporary of its own kernel. The comparison follows that arithmetic to the positions, so the kernel computing it has
// no reader left (one launch less per layer); arithmetic indices cannot express (a product of two positions) stays a
// temporary read as an index.
loop::Program positionArithmetic(tensor::Fn op) {
  loop::Program p;
  p.modelName = "arithmetic";
  auto arange = std::make_shared<torch::WeightData>(torch::WeightData{"arange", {0.f, 1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f}});
  auto zero = std::make_shared<torch::WeightData>(torch::WeightData{"zero", {0.f}});
  p.buffers = {loop::Buffer{loop::Buffer::Kind::Input, "pos", DType::I64, {1}, nullptr},
               loop::Buffer{loop::Buffer::Kind::Weight, "zero", DType::I64, {1}, zero},
               loop::Buffer{loop::Buffer::Kind::Temp, "index", DType::I64, {1}, nullptr},
               loop::Buffer{loop::Buffer::Kind::Weight, "arange", DType::I64, {8}, arange},
               loop::Buffer{loop::Buffer::Kind::Input, "x", DType::F32, {8}, nullptr},
               loop::Buffer{loop::Buffer::Kind::Output, "out", DType::F32, {8}, nullptr}};
  p.inputs = {0, 4};
  p.outputs = {5};
  const Idx p0 = idxVar(0, "p0");
  const loop::ExprP second = op == tensor::Fn::Add ? loop::load(1, {p0}) : loop::load(0, {idxConst(0)});
  p.kernels = {loop::Kernel{"k0_add", 2, {loop::Axis{0, "p0", 1}}, 1, {}, loop::apply(op, {second, loop::load(0, {idxConst(0)})})},
               loop::Kernel{"k1_where", 5, {loop::Axis{0, "p0", 8}}, 1, {},
                            loop::apply(tensor::Fn::Where, {loop::apply(tensor::Fn::Le, {loop::load(3, {p0}), loop::load(2, {idxConst(0)})}),
                                                            loop::load(4, {p0}), loop::imm(-1e30f)})}};
  loop::verify(p);
  return p;
}

TEST(IndexComparisons, ArithmeticOnPositionsIsFollowedToThePositions) {
  const std::vector<HostTensor> in{HostTensor{DType::I64, {1}, {5.f}}, randomTensor(DType::F32, {8}, 3)};
  loop::Program p = positionArithmetic(tensor::Fn::Add);
  const std::vector<HostTensor> before = loop::interpret(p, in);
  ASSERT_TRUE(loop::indexComparisons(p));
  EXPECT_NE(loop::print(p).find("select(p0 < pos[0] + 1, "), std::string::npos) << loop::print(p);
  loop::eliminateDeadBuffers(p);
  EXPECT_EQ(p.kernels.size(), 1u) << "the arithmetic's kernel has no reader left\n" << loop::print(p);
  EXPECT_EQ(loop::interpret(p, in)[0].values, before[0].values);

  loop::Program product = positionArithmetic(tensor::Fn::Mul);  // pos * pos: not an index expression
  ASSERT_TRUE(loop::indexComparisons(product));
  EXPECT_NE(loop::print(product).find("select(p0 < index[0] + 1, "), std::string::npos) << loop::print(product);
  loop::eliminateDeadBuffers(product);
  EXPECT_EQ(product.kernels.size(), 2u);
}

// A comparison whose value is stored (transformers' decoder-step mask, computed once for every layer) reading the
// positions through a broadcast kernel: it becomes select(p1 < pos[0] + 1, 1, 0), the view chased to the element it
// shows, and loop-fuse-producers inlines that into each of its many readers (more than kMaxFusionWorkGrowth times its
// work), so that the choice on it reaches each attention's score.
TEST(IndexComparisons, AStoredMaskOfPositionsBecomesIndicesAndReachesEveryReader) {
  loop::Program p;
  p.modelName = "shared";
  std::vector<float> arange(8);
  for (size_t i = 0; i < arange.size(); ++i) arange[i] = static_cast<float>(i);
  auto data = std::make_shared<torch::WeightData>(torch::WeightData{"arange", arange});
  const int readers = 12;
  p.buffers = {loop::Buffer{loop::Buffer::Kind::Input, "pos", DType::I64, {1}, nullptr},
               loop::Buffer{loop::Buffer::Kind::Weight, "arange", DType::I64, {8}, data},
               loop::Buffer{loop::Buffer::Kind::Temp, "wide", DType::I64, {8}, nullptr},
               loop::Buffer{loop::Buffer::Kind::Temp, "keep", DType::Bool, {8}, nullptr}};
  p.inputs = {0};
  const Idx p0 = idxVar(0, "p0");
  loop::Kernel broadcast{"k0_index_map", 2, {loop::Axis{0, "p0", 8}}, 1, {}, loop::load(0, {idxConst(0)})};
  loop::Kernel compare{"k1_le", 3, {loop::Axis{0, "p0", 8}}, 1, {},
                       loop::apply(tensor::Fn::Le, {loop::load(1, {p0}), loop::load(2, {p0})})};
  p.kernels = {broadcast, compare};
  for (int r = 0; r < readers; ++r) {
    p.buffers.push_back(loop::Buffer{loop::Buffer::Kind::Output, fmt::format("out{}", r), DType::F32, {8}, nullptr});
    p.outputs.push_back(static_cast<int>(p.buffers.size()) - 1);
    p.kernels.push_back(loop::Kernel{fmt::format("k{}_where", r + 2), static_cast<int>(p.buffers.size()) - 1,
                                     {loop::Axis{0, "p0", 8}}, 1, {},
                                     loop::apply(tensor::Fn::Where, {loop::load(3, {p0}), loop::imm(0.f), loop::imm(-1e30f)})});
  }
  const std::vector<HostTensor> in{HostTensor{DType::I64, {1}, {5.f}}};
  const std::vector<HostTensor> before = loop::interpret(p, in);
  ASSERT_TRUE(loop::indexComparisons(p));
  EXPECT_NE(loop::print(p).find("select(p0 < pos[0] + 1, 1, 0)"), std::string::npos) << loop::print(p);
  EXPECT_EQ(loop::fusionRefusal(p, 1), "") << "a mask of indices inlines into all " << readers << " readers";
  loop::fuseProducers(p);
  loop::eliminateDeadBuffers(p);
  EXPECT_EQ(p.kernels.size(), static_cast<size_t>(readers)) << loop::print(p);
  const std::vector<HostTensor> after = loop::interpret(p, in);
  for (int r = 0; r < readers; ++r) EXPECT_EQ(after[r].values, before[r].values) << "output " << r;
}

// ---- the decoder step's attention ----

struct DecodeStep {
  Compiled c = compileModel(test::fixturePath("hf_llama_decode_long"), {}, {}, "kernel");

  // The step's inputs with the token at `position`: random caches, token 7.
  std::vector<HostTensor> inputs(int64_t position) const {
    std::vector<HostTensor> in = test::randomInputs(c.kernelIR, 3);
    for (size_t i = 0; i < in.size(); ++i) {
      const std::string& name = c.kernelIR.buffers[static_cast<size_t>(c.kernelIR.inputs[i])].name;
      if (name == "ids") in[i].values = {7.f};
      if (name == "pos") in[i].values = {static_cast<float>(position)};
    }
    return in;
  }
};

TEST(DecodeAttention, EachLayerIsOneFlashKernelWithARunTimeKeyLimit) {
  DecodeStep step;
  int attention = 0;
  for (const loop::Kernel& k : step.c.loopIR.kernels) {
    if (!k.attention) continue;
    ++attention;
    std::optional<Idx> limit = loop::runtimeKeyLimit(k);
    ASSERT_TRUE(limit) << k.name;
    // key j < the position (a temporary computed from `pos`, read as an index) + 1
    const std::string text = toString(*limit);
    const std::string tail = "[0] + 1";
    EXPECT_TRUE(text.size() > tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0) << text;
  }
  EXPECT_EQ(attention, 2) << "one attention kernel per decoder layer";
}

TEST(DecodeAttention, ReadsKeysOnlyUpToTheRunTimeLength) {
  DecodeStep step;
  const kernel::Program& kp = step.c.kernelIR;
  // The attention kernels and the buffers their k and v come from (the caches after this step's write).
  std::vector<size_t> kernels;
  std::vector<int> keys, values;
  for (size_t i = 0; i < step.c.loopIR.kernels.size(); ++i) {
    const loop::Kernel& k = step.c.loopIR.kernels[i];
    if (!k.attention) continue;
    auto ops = loop::flashAttentionOperands(step.c.loopIR, k);
    ASSERT_TRUE(ops) << k.name;
    keys.push_back(ops->k->buffer);
    values.push_back(ops->v->buffer);
    for (size_t j = 0; j < kp.kernels.size(); ++j)
      if (kp.kernels[j].name == k.name) kernels.push_back(j);
  }
  ASSERT_EQ(kernels.size(), 2u);
  // Steps of 64 keys (f32): a token at position 3 sees keys 0..3, one step; at 200, keys 0..200, four steps of the 256.
  std::vector<int64_t> read[2];
  const int64_t positions[2] = {3, 200};
  for (int run = 0; run < 2; ++run) {
    kernel::InterpretCounts counts;
    const std::vector<HostTensor> in = step.inputs(positions[run]);
    const std::vector<HostTensor> got = kernel::interpret(kp, in, &counts);
    const std::vector<HostTensor> want = loop::interpret(step.c.loopIR, in);  // the mask applied to every key
    for (size_t o = 0; o < got.size(); ++o) EXPECT_LE(compare(got[o], want[o]).relL2, 1e-5) << "output " << o;
    for (size_t l = 0; l < kernels.size(); ++l) {
      read[run].push_back(counts.elementsRead[kernels[l]][static_cast<size_t>(keys[l])]);
      read[run].push_back(counts.elementsRead[kernels[l]][static_cast<size_t>(values[l])]);
    }
  }
  // 2 KV heads of 16, each read by the block of its 2 query heads (tile-share-kv-heads): 64 keys x 16 of k and of v per
  // step and KV head.
  for (size_t i = 0; i < read[0].size(); ++i) {
    EXPECT_EQ(read[0][i], 2 * 64 * 16) << "position 3, operand " << i;
    EXPECT_EQ(read[1][i], 2 * 4 * 64 * 16) << "position 200, operand " << i;
  }
}

// kernel-store-only-changes and kernel-launch-only-changes: each cache, a state written in place, is written at the
// token's position only, by the threads of that row alone; the kernel writing it reads none of the cache and the step's
// outputs (every cache whole) equal the Loop IR's, which rewrites every element.
TEST(DecodeCacheWrite, StoresOnlyTheTokensRowAndReadsNoneOfTheCache) {
  DecodeStep step;
  const kernel::Program& kp = step.c.kernelIR;
  std::vector<std::pair<size_t, int>> writers;  // (kernel, the cache it writes in place)
  for (auto [output, input] : kp.inPlace) {
    if (kp.buffers[static_cast<size_t>(input)].shape.size() != 4) continue;  // the caches, not the position counters
    for (size_t j = 0; j < kp.kernels.size(); ++j)
      for (const kernel::Param& prm : kp.kernels[j].params)
        if (prm.written && prm.buffer == output) writers.emplace_back(j, input);
  }
  ASSERT_EQ(writers.size(), 4u) << "a key and a value cache a layer";
  kernel::InterpretCounts counts;
  const std::vector<HostTensor> in = step.inputs(200);
  const std::vector<HostTensor> got = kernel::interpret(kp, in, &counts);
  const std::vector<HostTensor> want = loop::interpret(step.c.loopIR, in);
  for (size_t o = 0; o < got.size(); ++o) EXPECT_LE(compare(got[o], want[o]).relL2, 1e-5) << "output " << o;
  for (auto [j, cache] : writers)
    EXPECT_EQ(counts.elementsRead[j][static_cast<size_t>(cache)], 0) << kp.kernels[j].name << " reads the cache";
  // kernel-launch-only-changes: the threads of the token's row alone, guarded to a position inside the cache.
  const std::string text = kernel::print(kp);
  EXPECT_NE(text.find("if (pos[0] < p2"), std::string::npos) << text;
  EXPECT_NE(text.find("if (-1 < pos[0]) {"), std::string::npos) << text;
}

}  // namespace
}  // namespace kiln
