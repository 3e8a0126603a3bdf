// loop::inPlaceStates: which model states a forward may update in place (their new value written over the bytes of the
// current one), on small Loop programs, and on the decoder-step fixture.
#include <gtest/gtest.h>

#include "kiln/driver/pipeline.h"
#include "kiln/loop/ir.h"
#include "test_support.h"

namespace kiln {
namespace {

// A cache write of a decoder step: inputs x [8] and pos (the forward's own) and the state cache [4, 8]; k0 writes
// new_cache = where(p0 == pos[0], x[p1], cache[p0, p1]) (as loop-index-comparisons leaves it), k1 reads `reader` (the new
// cache by default) into the forward's own output.
loop::Program cacheWrite(const loop::ExprP& oldValue, int reader = 4) {
  loop::Program p;
  p.modelName = "cache";
  p.buffers = {loop::Buffer{loop::Buffer::Kind::Input, "x", DType::F32, {8}, nullptr},
               loop::Buffer{loop::Buffer::Kind::Input, "pos", DType::I64, {1}, nullptr},
               loop::Buffer{loop::Buffer::Kind::Input, "cache", DType::F32, {4, 8}, nullptr},
               loop::Buffer{loop::Buffer::Kind::Output, "sum", DType::F32, {8}, nullptr},
               loop::Buffer{loop::Buffer::Kind::Output, "new_cache", DType::F32, {4, 8}, nullptr}};
  p.inputs = {0, 1, 2};
  p.outputs = {3, 4};
  const Idx p0 = idxVar(0, "p0"), p1 = idxVar(1, "p1"), r0 = idxVar(2, "r0");
  const Idx position = idxLoad(1, "pos", idxConst(0));
  const loop::ExprP written = loop::select(p0, idxAdd(position, 1), loop::load(0, {p1}), oldValue);
  loop::Kernel write{"k0_where", 4, {loop::Axis{0, "p0", 4}, loop::Axis{1, "p1", 8}}, 2, {},
                     loop::select(p0, position, oldValue, written)};
  loop::Kernel sum{"k1_reduce_sum", 3, {loop::Axis{1, "p1", 8}}, 1,
                   {loop::Reduction{tensor::ReduceFn::Sum, {loop::Axis{2, "r0", 4}}, loop::load(reader, {r0, p1})}},
                   loop::accRef(0)};
  p.kernels = {write, sum};
  loop::verify(p);
  return p;
}

loop::ExprP cacheAt(Idx row, Idx col) { return loop::load(2, {std::move(row), std::move(col)}); }

TEST(StateInPlace, ACacheWriteReadingOnlyItsOwnPointIsInPlace) {
  const loop::Program p = cacheWrite(cacheAt(idxVar(0, "p0"), idxVar(1, "p1")));
  EXPECT_EQ(loop::inPlaceStates(p, 1), (std::vector<std::pair<int, int>>{{4, 2}}));
  EXPECT_TRUE(loop::inPlaceStates(p, 0).empty()) << "no state: nothing in place";
}

TEST(StateInPlace, NotWhereAnotherPointOrALaterKernelReadsTheCurrentValue) {
  // The writer reads row 0 of the cache: another thread's element, which that thread may have written already.
  EXPECT_TRUE(loop::inPlaceStates(cacheWrite(cacheAt(idxConst(0), idxVar(1, "p1"))), 1).empty());
  // A later kernel reads the current value, which the in-place write would have replaced.
  EXPECT_TRUE(loop::inPlaceStates(cacheWrite(cacheAt(idxVar(0, "p0"), idxVar(1, "p1")), /*reader=*/2), 1).empty());
}

// The decoder step of models/hf_decode.py: every key and value cache and position counter is updated in place.
TEST(StateInPlace, TheDecoderStepUpdatesEveryStateInPlace) {
  const Compiled c = compileModel(test::fixturePath("hf_llama_decode_tiny"), {}, {}, "kernel");
  ASSERT_EQ(c.torchIR.states.size(), 6u);
  EXPECT_EQ(c.kernelIR.inPlace.size(), 6u);
  for (auto [output, input] : c.kernelIR.inPlace)
    EXPECT_EQ(c.kernelIR.buffers[static_cast<size_t>(input)].kind, loop::Buffer::Kind::Input) << output;
}

}  // namespace
}  // namespace kiln
