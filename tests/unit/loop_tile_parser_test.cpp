// The Loop and Tile IR parsers (kiln/loop/parser.h, kiln/tile/parser.h): for every fixture, the Loop and Tile IR the
// pipeline makes print, parse and print again to the same text and verify; and what the parsed programs lower to is
// what the originals lower to (the Tile passes run on the parsed Loop IR give the pipeline's Tile IR, and the parsed
// Tile IR lowers to the pipeline's Kernel IR), so the text loses nothing a pass reads. Malformed text gives one line
// naming the file, line and column.
#include <gtest/gtest.h>

#include "test_support.h"

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>
#include <set>

#include "kiln/driver/pipeline.h"
#include "kiln/kernel/lower.h"
#include "kiln/loop/parser.h"
#include "kiln/support/error.h"
#include "kiln/support/pipeline.h"
#include "kiln/tile/parser.h"

namespace kiln {
namespace {

tile::Program tilePipeline(const loop::Program& loopIR) {
  tile::Program t = tile::lowerFromLoop(loopIR);
  for (const auto& pass : tilePasses()) pass.run(t);
  return t;
}

class LoopTileParserRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(LoopTileParserRoundTrip, PrintParsePrintIsIdenticalAndLowersTheSame) {
  Compiled c = compileModel(test::fixturePath(GetParam()), {}, PipelineOptions{}, "kernel");
  const std::string loopText = loop::print(c.loopIR);
  loop::Program loopParsed = loop::parse(loopText, GetParam() + ".lir");
  EXPECT_EQ(loop::print(loopParsed), loopText);
  EXPECT_NO_THROW(loop::verify(loopParsed));
  EXPECT_EQ(tile::print(tilePipeline(loopParsed)), tile::print(c.tileIR)) << "the Tile passes on the parsed Loop IR";

  const std::string tileText = tile::print(c.tileIR);
  tile::Program tileParsed = tile::parse(tileText, GetParam() + ".tir");
  EXPECT_EQ(tile::print(tileParsed), tileText);
  EXPECT_NO_THROW(tile::verify(tileParsed));
  kernel::Program lowered = kernel::lowerFromTile(tileParsed);
  lowered.inPlace = c.kernelIR.inPlace;  // the memory plan's decision, which kernel-merge-launches reads
  for (const auto& pass : kernelPasses())  // as compileModel runs them: the passes on by default
    if (findPass(pass.name)->onByDefault) pass.run(lowered);
  EXPECT_EQ(kernel::print(lowered), kernel::print(c.kernelIR)) << "the parsed Tile IR lowered";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LoopTileParserRoundTrip, ::testing::ValuesIn(test::allFixtures()),
                         [](const auto& info) { return info.param; });

// A target with fewer SMs than its arch (as tests size grids) is written `target ARCH sms N` and reads back so.
TEST(TileParser, TargetWithOtherSmCount) {
  tile::Program t = compileModel(test::fixturePath("linear"), {}, {}, "tile").tileIR;
  t.target.smCount = 8;
  const std::string text = tile::print(t);
  EXPECT_NE(text.find("\ntarget sm_90a sms 8\n"), std::string::npos);
  EXPECT_EQ(tile::parse(text).target.smCount, 8);
  EXPECT_EQ(tile::print(tile::parse(text)), text);
}

// Every schedule field that is not the default is written, and a field set by hand reads back.
TEST(TileParser, ScheduleFieldsRoundTrip) {
  tile::TiledContraction s;
  s.mAxis = 1, s.nAxis = 2, s.tileM = 128, s.tileN = 64, s.tileK = 64, s.instruction = tile::TiledContraction::Instruction::Wgmma;
  s.a = {tile::TiledContraction::Copy::Tma, tile::TiledContraction::SharedLayout::Swizzled128};
  s.producerWarp = true, s.cluster = 2, s.multicastB = true, s.model = "a note = with blanks";
  const std::string fields = tile::scheduleFields(s);
  EXPECT_EQ(fields, "tiled_contraction m_axis=1 n_axis=2 tile_m=128 tile_n=64 tile_k=64 instruction=wgmma.m64nNk16 "
                    "a=tma/swizzled_128b cluster=2 multicast_b=true producer_warp=true model=\"a note = with blanks\"");
  ir_text::Cursor c("<test>", 1, fields);
  EXPECT_EQ(tile::scheduleFields(tile::parseSchedule(c)), fields);

  tile::FlashAttention f;
  f.keyTo = 1, f.ring = 3;
  EXPECT_EQ(tile::scheduleFields(f), "flash_attention ring=3 key_to=1");
}

std::string parseError(const std::function<void()>& parse) {
  try {
    parse();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

const char* kLoop =
    "// kiln loop IR: tiny\n"
    "buffer x : f32[4] input\n"
    "buffer out0 : f32[4] output\n"
    "\n"
    "kernel k0 writes out0  // aten::neg\n"
    "  for p0 < 4 parallel:\n"
    "    %0 = load x[p0]\n"
    "    %1 = neg(%0)\n"
    "    store out0[p0] = %1\n"
    "\n"
    "return out0\n";

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  text.replace(text.find(from), from.size(), to);
  return text;
}

TEST(LoopParser, SmallProgramInterpretsAsWritten) {
  loop::Program p = loop::parse(kLoop);
  ASSERT_NO_THROW(loop::verify(p));
  EXPECT_EQ(loop::print(p), kLoop);
  HostTensor x{DType::F32, {4}, {1, -2, 3, -4}};
  EXPECT_EQ(loop::interpret(p, {x})[0].values, (std::vector<float>{-1, 2, -3, 4}));
}

TEST(LoopParser, ErrorsNameLineAndColumn) {
  EXPECT_EQ(parseError([] { loop::parse(replaced(kLoop, "load x[p0]", "load x[p9]"), "f.lir"); }),
                       "f.lir:7:17: axis 'p9' is not defined here");
  EXPECT_EQ(parseError([] { loop::parse(replaced(kLoop, "neg(%0)", "nag(%0)"), "f.lir"); }), "f.lir:8:10: unknown function 'nag'");
  EXPECT_EQ(parseError([] { loop::parse(replaced(kLoop, "neg(%0)", "neg(%5)"), "f.lir"); }), "f.lir:8:14: '%5' is not defined above");
  EXPECT_EQ(parseError([] { loop::parse(replaced(kLoop, "return out0\n", ""), "f.lir"); }),
            "f.lir:10:1: the program ends without its 'return' line");
  EXPECT_EQ(parseError([] { loop::parse(replaced(kLoop, "    store out0[p0] = %1\n", ""), "f.lir"); }),
            "f.lir:9:1: the kernel's loop nest ends where the 'store' line was expected");
}

TEST(TileParser, ErrorsNameLineAndColumn) {
  const std::string tileText = tile::print(compileModel(test::fixturePath("elementwise"), {}, {}, "tile").tileIR);
  const size_t at = tileText.find("  schedule pointwise_map");
  ASSERT_NE(at, std::string::npos);
  const int line = static_cast<int>(std::count(tileText.begin(), tileText.begin() + static_cast<long>(at), '\n')) + 1;
  std::string bad = tileText;
  bad.replace(at, 24, "  schedule pointwise_map vectr=2");
  EXPECT_EQ(parseError([&] { tile::parse(bad, "f.tir"); }),
            fmt::format("f.tir:{}:26: pointwise_map has no field 'vectr' (fields: threads, vector, vectors_per_thread)", line));
  bad = tileText;
  bad.replace(at, 24, "  schedule pointwise_map vector=x");
  EXPECT_EQ(parseError([&] { tile::parse(bad, "f.tir"); }), fmt::format("f.tir:{}:33: expected an integer", line));
  bad = tileText;
  bad.replace(at, 24, "  schedule pointwise_mop");
  EXPECT_EQ(parseError([&] { tile::parse(bad, "f.tir"); }),
            fmt::format("f.tir:{}:12: unknown schedule strategy 'pointwise_mop' (pointwise_map, row_reduction, "
                        "tiled_contraction, flash_attention)",
                        line));
  EXPECT_EQ(parseError([&] { tile::parse(replaced(tileText, "\ntarget sm_90a\n", "\ntarget sm_91\n"), "f.tir"); }).substr(0, 38),
            "f.tir:2:8: unknown target 'sm_91' (kno");
}

}  // namespace
}  // namespace kiln
