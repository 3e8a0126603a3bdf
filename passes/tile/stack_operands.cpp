// tile-stack-operands: wgmma products whose stages all read one A (a SwiGLU's gate and up both multiply x) keep the
// stages' B slices one after another in each ring slot (TiledContraction::stackedB), so that one
// wgmma.m64n{stages * tile_n}k16 per 16 of k multiplies them all instead of one wgmma per stage.
//
// Why: each wgmma reads its A from shared memory; per stage that is the same A again, and a narrow wgmma (TinyLlama's
// gate/up at 128 tokens: m64n48) keeps the tensor cores busier per instruction issued when it is one wide one: before
// stacking, the two m64n48 wgmmas per 16 of k ran at about 38 % of the tensor cores' rate. (measurements:
// docs/history.md, "Warpgroup products on the whole model (2026-12-02)")
// The accumulators are the stages' in order (columns [st * tile_n, (st + 1) * tile_n) are stage st's), so the
// epilogue reads the same registers as before.
// Precondition: tile-shape-products has sized tile_n (its accumulator bound keeps stages * tile_n within 256).
// Postcondition: stackedB on every such product; the verifier's rule (one A, stages * tile_n a multiple of 8 up to 256).
#include <algorithm>

#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool stackOperands(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    auto* s = std::get_if<TiledContraction>(&p.schedules[i]);
    if (!s || s->instruction != TiledContraction::Instruction::Wgmma || s->stackedB) continue;
    const std::vector<size_t> src = aSources(contractionOf(*s, p.loop.kernels[i]));
    const int64_t stages = static_cast<int64_t>(src.size());
    if (stages < 2 || !std::all_of(src.begin(), src.end(), [](size_t a) { return a == 0; }) || stages * s->tileN > 256) continue;
    s->stackedB = true;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
