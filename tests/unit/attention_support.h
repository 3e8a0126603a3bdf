// What the attention tests share (attention_test.cpp, flash_attention_variants_test.cpp): a fixture compiled to a level,
// and flash_attention schedules run by the Kernel-IR interpreter against the Loop IR.
#pragma once

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/driver/pipeline.h"
#include "kiln/kernel/lower.h"
#include "test_support.h"

namespace kiln::attention_test {

// models/fixtures/<model>.pt compiled to `level`, with passes disabled or enabled.
inline Compiled compiled(const std::string& model, const std::string& level, std::vector<std::string> disable = {},
                         std::vector<std::string> enable = {}) {
  PipelineOptions o;
  o.disable.insert(disable.begin(), disable.end());
  o.enable.insert(enable.begin(), enable.end());
  return compileModel(test::fixturePath(model), {}, o, level);
}

// A fixture's tile program for `arch` with its attention in blocks of one warpgroup (64 rows of 16-row warps, no key
// split), as the suite's long rows are, and neither product by wgmma yet: what the wgmma rules start from.
inline tile::Program oneWarpgroup(const char* model, const std::string& arch) {
  tile::Program t = compileModel(test::fixturePath(model), {}, {}, "tile", std::nullopt, targetFor(arch)).tileIR;
  for (auto& s : t.schedules) {
    auto& f = std::get<tile::FlashAttention>(s);
    f.blockQ = 64;
    f.warpRows = 16;
    f.keySplit = 1;
    f.scoresByWgmma = false;
    f.valuesByWgmma = false;
  }
  return t;
}

// The kernels agree with the Loop IR to bf16 precision: they round the probabilities to bf16 for the tensor cores
// (relative to the running maximum), the Loop IR weights in f32.
inline void expectMatches(const std::vector<HostTensor>& got, const std::vector<HostTensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    Comparison cmp = compare(got[i], want[i]);
    EXPECT_LE(cmp.relL2, 1e-2) << "output " << i;
    EXPECT_TRUE(allFinite(got[i])) << "output " << i;
  }
}

// Schedule t verified, lowered, verified and run by the Kernel-IR interpreter.
inline std::vector<HostTensor> runSchedules(const tile::Program& t, const std::vector<HostTensor>& inputs) {
  tile::verify(t);
  kernel::Program kp = kernel::lowerFromTile(t);
  kernel::verify(kp);
  return kernel::interpret(kp, inputs);
}

// Each variant's change to every attention schedule of `model`, run by the Kernel-IR interpreter against the Loop IR.
using Variant = std::pair<std::string, std::function<void(tile::FlashAttention&)>>;
inline void expectVariantsMatch(const char* model, int seed, const std::vector<Variant>& variants) {
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

}  // namespace kiln::attention_test
