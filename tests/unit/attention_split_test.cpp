// tile-split-attention-keys (FlashAttention::splitKeys): the heavier half of a row's causal query blocks each walked by
// two blocks over half of its steps, the second to finish (a ticket per split query block) combining both halves'
// maxima, sums and outputs. The rule, the verifier's conditions, and the kernels against the Loop IR through the
// Kernel-IR interpreter (which checks every ticket and starts the counters at zero).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <functional>

#include "attention_support.h"
#include "kiln/support/error.h"
#include "kiln/tile/layout.h"

namespace kiln {
namespace {
using attention_test::compiled;
using attention_test::expectMatches;
using attention_test::runSchedules;

tile::FlashAttention& flash(tile::Program& t, size_t i = 0) { return std::get<tile::FlashAttention>(t.schedules.at(i)); }

// 384 tokens at head dim 128 in query blocks of 64 and steps of 64 keys: the last block walks 6 steps, so the rule splits
// the last 3 query blocks (6, 5 and 4 steps; the lightest split one 4) of each of the 2 heads; in steps of 128 (3 steps)
// it splits nothing, nor f32 attention (CUDA cores) or a sliding window (keys cut off below), whatever the threshold.
TEST(SplitAttentionKeys, SplitsTheHeavierHalfOfLongCausalRows) {
  tile::Program t = compiled("attention_bf16_split", "tile", {"tile-split-attention-keys"}).tileIR;
  flash(t).blockQ = 64;
  flash(t).blockKV = 64;
  tile::Program coarse = t;
  flash(coarse).blockKV = 128;
  EXPECT_FALSE(tile::splitAttentionKeys(coarse));
  ASSERT_TRUE(tile::splitAttentionKeys(t));
  const tile::FlashAttention& f = flash(t);
  EXPECT_TRUE(f.splitKeys);
  const loop::Kernel& k = t.loop.kernels[0];
  EXPECT_EQ(tile::flashSplitBlocks(f, k), 3);
  EXPECT_EQ(tile::flashLightestSplitSteps(f, k), 4);
  EXPECT_EQ(tile::gridBlocks(f, k), 2 * (6 + 3));
  const loop::Buffer& counters = t.loop.buffers.at(static_cast<size_t>(f.counters));
  const loop::Buffer& halves = t.loop.buffers.at(static_cast<size_t>(f.partials));
  EXPECT_EQ(counters.kind, loop::Buffer::Kind::Counters);
  EXPECT_EQ(numel(counters.shape), 2 * 3);
  EXPECT_EQ(halves.kind, loop::Buffer::Kind::Temp);
  EXPECT_EQ(numel(halves.shape), 2 * 3 * 2 * tile::flashCombineValues(128) * 128);
  EXPECT_NE(tile::print(t).find("the 3 heaviest query blocks of a row walked by two blocks each"), std::string::npos)
      << tile::print(t);
  EXPECT_FALSE(tile::splitAttentionKeys(t)) << "already split";

  tile::Program f32 = compiled("attention_f32", "tile").tileIR;
  tile::Program windowed = compiled("attention_bf16", "tile").tileIR;  // k0 causal, k1 a window of 40 keys
  EXPECT_FALSE(tile::splitAttentionKeys(f32, 1));
  tile::splitAttentionKeys(windowed, 1);
  EXPECT_FALSE(flash(windowed, 1).splitKeys);
  // The default pipeline leaves the fixture's own schedule (blocks of 16 rows, steps of 128 keys: 3 steps) whole.
  tile::Program own = compiled("attention_bf16_split", "tile").tileIR;
  EXPECT_FALSE(flash(own).splitKeys);
}

// The verifier asks for the conditions the lowering relies on and the buffers it writes.
TEST(SplitAttentionKeys, TheVerifierRefusesWhatTheLoweringCannotRun) {
  tile::Program t = compiled("attention_bf16_split", "tile").tileIR;
  flash(t).blockQ = 64;
  flash(t).blockKV = 64;
  ASSERT_TRUE(tile::splitAttentionKeys(t));
  tile::verify(t);
  auto refused = [&](const std::function<void(tile::Program&)>& change) {
    tile::Program bad = t;
    change(bad);
    EXPECT_THROW(tile::verify(bad), InternalError);
  };
  refused([](tile::Program& p) { flash(p).keySplit = 2; });
  refused([](tile::Program& p) { flash(p).warpRows = 32; });
  refused([](tile::Program& p) { flash(p).counters = flash(p).partials; });
  refused([](tile::Program& p) { p.loop.buffers[static_cast<size_t>(flash(p).partials)].shape = {7}; });
  refused([](tile::Program& p) { flash(p).blockKV = 128, flash(p).blockQ = 16; });  // 24 query blocks: the lightest split walks 2
}

// Against the Loop IR: blocks of 16 and 64 rows, steps of 64 and 128 keys (the lightest split block 1 or more steps
// whole), scores a step ahead or a ring of 3, row sums by mma or additions, rows inner or not; 384 tokens at head dim
// 128 and 200 (the last step partial) at 16.
TEST(SplitAttentionKeys, HalvesCombinedMatchTheLoopInterpreter) {
  for (const char* model : {"attention_bf16_split", "attention_bf16_long"}) {
    Compiled c = compiled(model, "tile", {"tile-split-attention-keys"});
    auto inputs = test::randomInputs(c.loopIR, 17);
    auto want = loop::interpret(c.loopIR, inputs);
    for (int64_t rows : {16, 64})
      for (int64_t keys : {64, 128})
        for (bool ahead : {false, true})
          for (bool inner : {false, true}) {
            SCOPED_TRACE(fmt::format("{}: block_q {} block_kv {} scores ahead {} rows inner {}", model, rows, keys, ahead, inner));
            tile::Program t = c.tileIR;
            tile::FlashAttention& f = flash(t);
            f.blockQ = rows;
            f.blockKV = keys;
            f.scoresAhead = ahead;
            f.ring = ahead ? 2 : 3;
            f.rowsInner = inner;
            f.rowSumsByMma = !ahead;
            if (!tile::splitAttentionKeys(t, 1)) {
              EXPECT_LT(tile::flashLightestSplitSteps([&] { tile::FlashAttention s = f; s.splitKeys = true; return s; }(),
                                                      t.loop.kernels[0]), 2);
              continue;
            }
            expectMatches(runSchedules(t, inputs), want);
          }
  }
}

// The generated kernel: one ticket per split query block, the halves' values stored and loaded as f32.
TEST(SplitAttentionKeys, TheKernelTakesOneTicketPerSplitQueryBlock) {
  tile::Program t = compiled("attention_bf16_split", "tile").tileIR;
  flash(t).blockQ = 64;
  flash(t).blockKV = 64;
  ASSERT_TRUE(tile::splitAttentionKeys(t));
  const kernel::Program kp = kernel::lowerFromTile(t);
  const std::string text = kernel::print(kp);
  EXPECT_NE(text.find("ticket"), std::string::npos) << text;
  ASSERT_EQ(kp.kernels.size(), 1u);
  EXPECT_EQ(kp.kernels[0].grid[0], 18);
  int written = 0;
  for (const kernel::Param& p : kp.kernels[0].params) written += p.written ? 1 : 0;
  EXPECT_EQ(written, 3) << "the output, the halves and the counters";
}

}  // namespace
}  // namespace kiln
