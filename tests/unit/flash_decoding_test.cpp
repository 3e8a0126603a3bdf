// Flash-decoding (issue 42 item 3; tile-split-attention-keys, FlashAttention::keyBlocks): several blocks share a query
// block's key steps and the last to finish merges their partial rows. Each split count is run by the Kernel-IR
// interpreter against the Loop IR, on a decoder step whose keys end at a run-time position (f32 on CUDA cores) and on
// compile-time shapes on tensor cores (bf16, causal masks, key-split warps, scores a step ahead), and the keys read
// are counted: splitting divides the walk, it reads no key twice.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <map>

#include "attention_support.h"
#include "kiln/loop/attention.h"
#include "kiln/tile/layout.h"
#include "kiln/tile/parser.h"

namespace kiln {
namespace {

using attention_test::compiled;

// Every flash schedule of t split over `runs` blocks (1: not split), with the program's buffers for it.
void splitKeys(tile::Program& t, int64_t runs) {
  for (size_t i = 0; i < t.schedules.size(); ++i) {
    auto* f = std::get_if<tile::FlashAttention>(&t.schedules[i]);
    if (!f) continue;
    const loop::Kernel& k = t.loop.kernels[i];
    f->keyBlocks = runs;
    if (runs == 1) continue;
    f->pairBlocks = false;
    f->packedPairs = 0;
    f->partials = tile::programBuffer(t, "flash_partials", loop::Buffer::Kind::Temp, DType::F32, tile::flashPartialsElements(*f, k));
    f->counters = tile::programBuffer(t, "flash_counters", loop::Buffer::Kind::Counters, DType::I64, tile::flashQueryBlocksInAll(*f, k));
  }
}

// The elements of q's, k's and v's buffers that t's attention kernels read, run on `inputs`, and its outputs.
struct SplitRun {
  std::vector<HostTensor> outputs;
  std::vector<int64_t> operandReads;  // per attention kernel: q, k, v
  int64_t partialReads = 0;           // of the split's partials, by every attention kernel
};
SplitRun runSplit(const tile::Program& t, const std::vector<HostTensor>& inputs) {
  tile::verify(t);
  kernel::Program kp = kernel::lowerFromTile(t);
  kernel::verify(kp);
  kernel::InterpretCounts counts;
  SplitRun r{kernel::interpret(kp, inputs, &counts), {}};
  for (size_t i = 0; i < t.loop.kernels.size(); ++i) {
    const loop::Kernel& k = t.loop.kernels[i];
    if (!k.attention) continue;
    const auto ops = loop::flashAttentionOperands(t.loop, k);
    EXPECT_TRUE(ops) << k.name;
    if (!ops) continue;
    for (const loop::Expr* operand : {ops->q, ops->k, ops->v})
      r.operandReads.push_back(counts.elementsRead[i][static_cast<size_t>(operand->buffer)]);
    const auto* f = std::get_if<tile::FlashAttention>(&t.schedules[i]);
    if (f && f->keyBlocks > 1) r.partialReads += counts.elementsRead[i][static_cast<size_t>(f->partials)];
  }
  return r;
}

// hf_llama_decode_long: the tiny Llama decoder step (4 query heads over 2 KV heads of 16, a cache of 256), f32, keys in
// steps of 64 up to the position. At position 3 one step is live, at 64 two, at 130 three, at 255 four: with more runs
// than live steps some blocks walk nothing, and with one live step the run walking it stores the output itself. Each query head in a block of its own (tile-share-kv-heads off: 4 blocks
// before the split), and the two heads of each KV head in one block (the default: 2 blocks), which reads each KV head's
// keys and values once instead of twice.
TEST(FlashDecoding, EverySplitOfADecoderStepMatchesTheLoopInterpreter) {
  for (bool shared : {false, true}) {
    Compiled c = compiled("hf_llama_decode_long", "tile", shared ? std::vector<std::string>{} : std::vector<std::string>{"tile-share-kv-heads"});
    const int64_t readers = shared ? 2 : 4;  // blocks reading each layer's k and v rows, before the split
    for (int64_t position : {3, 64, 130, 255}) {
      std::vector<HostTensor> in = test::randomInputs(c.loopIR, 5);
      for (size_t i = 0; i < in.size(); ++i) {
        const std::string& name = c.loopIR.buffers[static_cast<size_t>(c.loopIR.inputs[i])].name;
        if (name == "ids") in[i].values = {7.f};
        if (name == "pos") in[i].values = {static_cast<float>(position)};
      }
      const std::vector<HostTensor> want = loop::interpret(c.loopIR, in);
      const int64_t live = position / 64 + 1;  // steps of 64 keys up to the position
      for (int64_t runs : {1, 2, 3, 4, 8, 16}) {
        SCOPED_TRACE(fmt::format("{}, position {}, {} blocks per query block", shared ? "heads by KV head" : "a block per head",
                                 position, runs));
        tile::Program t = c.tileIR;
        splitKeys(t, runs);
        const SplitRun got = runSplit(t, in);
        ASSERT_EQ(got.outputs.size(), want.size());
        for (size_t o = 0; o < want.size(); ++o) EXPECT_LE(compare(got.outputs[o], want[o]).relL2, 1e-5) << "output " << o;
        // One live step: the run walking it stores the output itself, no partials merged; more: the last block merges.
        if (runs > 1) EXPECT_EQ(got.partialReads > 0, live > 1) << got.partialReads << " partial values read";
        ASSERT_EQ(got.operandReads.size(), 6u) << "two layers' q, k and v";
        for (size_t layer = 0; layer < 2; ++layer) {
          // k's and v's live rows (16 wide) once per reading block, whatever the split; without sharing, q's row (4
          // heads of 16) once per block with steps to walk
          if (!shared) EXPECT_EQ(got.operandReads[3 * layer], 4 * 16 * std::min(runs, live)) << "layer " << layer;
          EXPECT_EQ(got.operandReads[3 * layer + 1], readers * live * 64 * 16) << "layer " << layer;
          EXPECT_EQ(got.operandReads[3 * layer + 2], readers * live * 64 * 16) << "layer " << layer;
        }
      }
    }
  }
}

// Tensor cores, keys bounded at compile time: the suite's bf16 attention shapes with every split, alone and with what
// the lowering combines it with (two and four warps splitting each step's keys, scores a step ahead, a causal mask).
TEST(FlashDecoding, SplitsOnTensorCoresMatchTheLoopInterpreter) {
  for (const char* model : {"attention_bf16", "attention_bf16_long"}) {
    Compiled c = compiled(model, "tile");
    const std::vector<HostTensor> in = test::randomInputs(c.loopIR, 11);
    const std::vector<HostTensor> want = loop::interpret(c.loopIR, in);
    std::vector<int64_t> unsplit;
    for (int64_t runs : {1, 2, 3, 4}) {
      for (int variant = 0; variant < 3; ++variant) {
        SCOPED_TRACE(fmt::format("{}: {} blocks, variant {}", model, runs, variant));
        tile::Program t = c.tileIR;
        for (size_t i = 0; i < t.schedules.size(); ++i) {
          auto& f = std::get<tile::FlashAttention>(t.schedules[i]);
          f.scoresByWgmma = f.valuesByWgmma = false;
          f.blockQ = variant == 2 ? 64 : 16;
          f.warpRows = 16;
          f.keySplit = variant == 1 ? 2 : variant == 2 ? 4 : 1;
          f.scoresAhead = variant == 0 && f.ring == 2 && t.loop.kernels[i].attention->key.extent > f.blockKV;
          f.rowsInner = false;
        }
        splitKeys(t, runs);
        const SplitRun got = runSplit(t, in);
        attention_test::expectMatches(got.outputs, want);
        std::vector<int64_t> keysAndValues;
        for (size_t i = 0; i < got.operandReads.size(); ++i)
          if (i % 3 != 0) keysAndValues.push_back(got.operandReads[i]);
        if (runs == 1 && variant == 0) unsplit = keysAndValues;
        if (variant == 0) EXPECT_EQ(keysAndValues, unsplit) << "a split reads no key twice";
      }
    }
  }
}

// The rule: a decoder step's attention (2 query blocks, each the 2 heads of a KV head) on 132 SMs takes 2 blocks a query
// block (half its 4 compile-time steps); on 4 SMs also 2 (4 / 2), on 2 SMs none (one block each fills them). A
// prefill-shaped attention (the fixtures' 64-row blocks) is left alone. The buffers: f32 partials for every block's
// threads, a counter per query block, shared by the program's attention kernels.
TEST(FlashDecoding, TheRuleSplitsDecoderStepsThatLeaveSmsIdle) {
  Compiled c = compiled("hf_llama_decode_long", "tile", {"tile-split-attention-keys"});
  const std::map<int64_t, int64_t> expected{{0, 2}, {4, 2}, {2, 1}};
  for (const auto& [sms, runs] : expected) {
    tile::Program t = c.tileIR;
    EXPECT_EQ(tile::splitAttentionKeys(t, sms), runs > 1) << sms << " SMs";
    int attention = 0;
    for (size_t i = 0; i < t.schedules.size(); ++i) {
      const auto* f = std::get_if<tile::FlashAttention>(&t.schedules[i]);
      if (!f) continue;
      ++attention;
      EXPECT_EQ(f->keyBlocks, runs) << sms << " SMs";
      if (runs == 1) continue;
      const loop::Buffer& partials = t.loop.buffers[static_cast<size_t>(f->partials)];
      const loop::Buffer& counters = t.loop.buffers[static_cast<size_t>(f->counters)];
      EXPECT_EQ(partials.kind, loop::Buffer::Kind::Temp);
      EXPECT_EQ(numel(partials.shape), 4 * 12 * 128) << "4 blocks x 12 values (2 rows, 8 outputs) x 128 threads";
      EXPECT_EQ(counters.kind, loop::Buffer::Kind::Counters);
      EXPECT_EQ(numel(counters.shape), 2);
    }
    EXPECT_EQ(attention, 2);
    if (runs > 1) {
      EXPECT_NO_THROW(tile::verify(t));
      EXPECT_FALSE(tile::splitAttentionKeys(t, sms)) << "a second run changes nothing";
      EXPECT_EQ(tile::print(tile::parse(tile::print(t))), tile::print(t)) << "key_blocks, partials and counters round-trip";
    }
  }
  for (const char* model : {"attention_bf16", "attention_f32"}) {
    tile::Program t = compiled(model, "tile", {"tile-split-attention-keys"}).tileIR;
    EXPECT_FALSE(tile::splitAttentionKeys(t)) << model;
  }
}

// tile-share-kv-heads: the decoder step's heads become the query axis in blocks of the 2 query heads of each KV head
// (a block of 4 would span two KV heads); an attention over many query rows (a prefill's) keeps its query axis; a
// schedule whose blocks of rows would not share k and v is refused by the verifier.
TEST(FlashDecoding, QueryHeadsSharingAKvHeadShareABlock) {
  Compiled c = compiled("hf_llama_decode_long", "tile", {"tile-share-kv-heads", "tile-split-attention-keys"});
  tile::Program t = c.tileIR;
  ASSERT_TRUE(tile::shareKvHeads(t));
  for (size_t i = 0; i < t.schedules.size(); ++i) {
    const auto* f = std::get_if<tile::FlashAttention>(&t.schedules[i]);
    if (!f) continue;
    EXPECT_EQ(t.loop.kernels[i].parallel[static_cast<size_t>(f->queryAxis)].extent, 4) << "the heads";
    EXPECT_EQ(f->blockRows, 2);
    EXPECT_EQ(tile::flashQueryBlocksInAll(*f, t.loop.kernels[i]), 2);
    EXPECT_TRUE(loop::sharedAcrossRows(t.loop, t.loop.kernels[i], f->queryAxis, 2));
    EXPECT_FALSE(loop::sharedAcrossRows(t.loop, t.loop.kernels[i], f->queryAxis, 4));
  }
  EXPECT_NO_THROW(tile::verify(t));
  EXPECT_FALSE(tile::shareKvHeads(t)) << "a second run changes nothing";
  EXPECT_EQ(tile::print(tile::parse(tile::print(t))), tile::print(t)) << "block_rows round-trips";
  for (auto& s : t.schedules)
    if (auto* f = std::get_if<tile::FlashAttention>(&s)) f->blockRows = 4;
  EXPECT_THROW(tile::verify(t), InternalError);
  tile::Program prefill = compiled("attention_bf16", "tile").tileIR;
  EXPECT_FALSE(tile::shareKvHeads(prefill));
}

// Refused by the verifier: a split with paired or packed query blocks, beyond kFlashMaxKeyBlocks, or without its
// buffers.
TEST(FlashDecoding, TheVerifierRefusesSplitsTheLoweringCannotRun) {
  Compiled c = compiled("hf_llama_decode_long", "tile");
  std::vector<std::function<void(tile::Program&, tile::FlashAttention&)>> changes{
      [](tile::Program&, tile::FlashAttention& f) { f.pairBlocks = true; },
      [](tile::Program&, tile::FlashAttention& f) { f.keyBlocks = tile::kFlashMaxKeyBlocks + 1; },
      [](tile::Program&, tile::FlashAttention& f) { f.counters = -1; },
      [](tile::Program&, tile::FlashAttention& f) { f.counters = f.partials; },
      [](tile::Program& t, tile::FlashAttention& f) { t.loop.buffers[static_cast<size_t>(f.partials)].shape = {16}; },
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    tile::Program t = c.tileIR;
    for (size_t s = 0; s < t.schedules.size(); ++s)
      if (auto* f = std::get_if<tile::FlashAttention>(&t.schedules[s])) {
        ASSERT_EQ(f->keyBlocks, 2);
        changes[i](t, *f);
      }
    EXPECT_THROW(tile::verify(t), InternalError) << "change " << i;
  }
}

}  // namespace
}  // namespace kiln
