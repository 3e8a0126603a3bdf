// The tensor-core flash_attention schedules tile passes choose among (block and step sizes, key splits, pairing and
// interleaving, ring depths, warps of two row groups, row sums by mma, scores a step ahead, scores and P·V by wgmma), each run by
// the Kernel-IR interpreter against the Loop IR on the attention fixtures (models/attention_bf16.py), and the verifier's
// limits on them.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <functional>

#include "attention_support.h"
#include "kiln/cuda/emitter.h"
#include "kiln/driver/pipeline.h"
#include "kiln/kernel/lower.h"
#include "kiln/loop/attention.h"
#include "kiln/support/error.h"
#include "kiln/tile/layout.h"
#include "test_support.h"

namespace kiln {
namespace {
using namespace attention_test;  // NOLINT(google-build-using-namespace): the attention tests' shared helpers

// A one-warpgroup schedule (64 rows of 16-row warps, no key split) with the choices the wgmma tests sweep, as a variant.
struct Warpgroup {
  int64_t keys = 64, ring = 2;
  bool paired = false, sums = false, ahead = false, scores = false, values = false;
  Variant variant() const {
    return {fmt::format("block_kv {} paired {} ring {} row sums by mma {} scores ahead {} scores by wgmma {} p · v by wgmma {}", keys,
                        paired, ring, sums, ahead, scores, values),
            [w = *this](tile::FlashAttention& f) {
              f.blockQ = 64;
              f.warpRows = 16;
              f.keySplit = 1;
              f.blockKV = w.keys;
              f.pairBlocks = w.paired;
              f.rowsInner = !w.paired;
              f.ring = w.ring;
              f.rowSumsByMma = w.sums;
              f.scoresAhead = w.ahead;
              f.scoresByWgmma = w.scores;
              f.valuesByWgmma = w.values;
            }};
  }
};

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
  f.valuesByWgmma = false;
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
  tile::Program byWgmma = oneWarpgroup("attention_bf16_deep", "sm_90a");
  ASSERT_TRUE(tile::attentionScoresByWgmma(byWgmma));
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

// tile-attention-scores-by-wgmma (docs/pipeline.md): on sm_90a for blocks of one warpgroup (64 rows of 16-row warps) of
// depth a multiple of 64, not for smaller blocks, shallower depths or other targets; the scores by wgmma (q and k in 128-byte-swizzled rows) at both step depths, paired or interleaved, two and
// three ring slots, row sums by mma or not, a step ahead (the next step's group issued before the softmax) or not, at
// head dims 64 and 128 (_deep), against the Loop IR.
TEST(FlashAttention, ScoresByWgmmaMatchTheLoopInterpreter) {
  EXPECT_FALSE(std::get<tile::FlashAttention>(compiled("attention_bf16", "tile", {}, {"tile-attention-scores-by-wgmma"})
                                                  .tileIR.schedules[0]).scoresByWgmma) << "16-row blocks";
  tile::Program deep = oneWarpgroup("attention_bf16_deep", "sm_90a"), shallow = oneWarpgroup("attention_bf16_long", "sm_90a");
  tile::Program ampere = oneWarpgroup("attention_bf16_deep", "sm_80");
  EXPECT_TRUE(tile::attentionScoresByWgmma(deep));
  EXPECT_FALSE(tile::attentionScoresByWgmma(shallow)) << "depth 16";
  EXPECT_FALSE(tile::attentionScoresByWgmma(ampere));
  std::vector<Variant> variants;
  for (int64_t keys : {64, 128})
    for (bool paired : {false, true})
      for (int64_t ring : {2, 3})
        for (bool sums : {true, false})
          for (bool ahead : {false, true}) {
          if ((ring == 3 && paired) || (!sums && (keys != 128 || ring != 2)) || (ahead && ring != 2)) continue;
          variants.push_back(Warpgroup{keys, ring, paired, sums, ahead, true, false}.variant());
          }
  for (const char* model : {"attention_bf16", "attention_bf16_deep"}) expectVariantsMatch(model, 12, variants);
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

// tile-attention-values-by-wgmma: on sm_90a for blocks of one warpgroup (64 rows of 16-row warps) with output rows of 128
// to 256 values, not for smaller blocks, rows of 16 or 64 values or other targets; P·V by wgmma (p from registers, v in 128-byte-
// swizzled rows) at both step depths, paired or interleaved, two and three ring slots, row sums by mma or not, scores a
// step ahead or not, scores by wgmma or by mma.sync, at output widths 64 (causal and windowed) and 128 (_deep), against
// the Loop IR; the emitted step issues one wgmma per 16 keys from the packed p and no ldmatrix.trans, and nvcc takes it;
// the verifier refuses it for other blocks.
TEST(FlashAttention, ValuesByWgmmaMatchTheLoopInterpreter) {
  EXPECT_FALSE(std::get<tile::FlashAttention>(compiled("attention_bf16_deep", "tile").tileIR.schedules[0]).valuesByWgmma)
      << "16-row blocks";
  tile::Program t = oneWarpgroup("attention_bf16_deep", "sm_90a");
  EXPECT_TRUE(tile::attentionValuesByWgmma(t));
  for (const auto& s : t.schedules) EXPECT_TRUE(std::get<tile::FlashAttention>(s).valuesByWgmma);
  for (const char* narrow : {"attention_bf16_long", "attention_bf16"}) {
    tile::Program n = oneWarpgroup(narrow, "sm_90a");
    EXPECT_FALSE(tile::attentionValuesByWgmma(n)) << narrow << ": rows of 16 and 64 values";
  }
  tile::Program ampere = oneWarpgroup("attention_bf16_deep", "sm_80");
  EXPECT_FALSE(tile::attentionValuesByWgmma(ampere));
  tile::verify(t);
  kernel::Program kp = kernel::lowerFromTile(t);
  kernel::verify(kp);
  const std::string cuda = cuda::print(cuda::emit(kp));
  EXPECT_NE(cuda.find("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16"), std::string::npos) << cuda;
  EXPECT_NE(cuda.find("kiln::wgmma_desc_swizzle128(&vs["), std::string::npos);
  EXPECT_EQ(cuda.find("ldmatrix_pairs<true>"), std::string::npos) << "v is read by wgmma only";
  test::TempDir tmp;
  EXPECT_NO_THROW(cuda::writeArtifacts(kp, cuda::emit(kp), tmp.path / "a", cuda::ArtifactOptions{"sm_90a", true}));
  std::vector<Variant> variants;
  for (int64_t keys : {64, 128})
    for (bool paired : {false, true})
      for (int64_t ring : {2, 3})
        for (bool ahead : {false, true})
          for (bool scores : {false, true}) {
            if ((ring == 3 && (paired || ahead)) || (scores && (keys != 64 || paired)) || (paired && ahead)) continue;
            variants.push_back(Warpgroup{keys, ring, paired, /*sums=*/keys == 64, ahead, scores, true}.variant());
          }
  for (const char* model : {"attention_bf16", "attention_bf16_deep"}) expectVariantsMatch(model, 14, variants);
  tile::Program bad = compiled("attention_bf16", "tile").tileIR;
  for (auto& s : bad.schedules) std::get<tile::FlashAttention>(s).valuesByWgmma = true;  // blocks of 16 rows
  std::string error;
  try {
    tile::verify(bad);
  } catch (const InternalError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("p · v by wgmma needs sm_90a"), std::string::npos) << error;
}

}  // namespace
}  // namespace kiln
