// tile-deep-k-slices: tiled matrix products stage a deeper slice of the reduction per step: tile_k 64 (or 32)
// instead of tile-tiled-contractions' 16. Each step of the tiled schedule loads its operand slices from global
// memory, synchronises, multiplies and synchronises again, so at tile_k 16 a block waits for memory 16 products
// at a time (a 32 x 32 tensor-core tile issues 2 mma per warp between two barriers); a deeper slice puts 4x as
// many loads in flight per wait and divides the barriers by 4. The slice must fit the 48 KB of static shared
// memory a block may declare (tile::operandSliceBytes: f32 slices, or half that and a little padding when
// tile-mma-operand-pairs, which runs first, keeps them in bf16/f16); the deepest of 64 and 32 that fits is taken,
// else the schedule keeps 16. Never deeper than the reduction rounded up to 16.
//
// Measured faster on bf16 and f32 products alike (measurements: docs/history.md, "Tiles and tensor cores (mma.sync)").
// The lowering is the same code at any tile_k (kernel-lower-from-tile: a k loop per slice on CUDA cores, tile_k / 16
// mma k-steps on tensor cores).
#include "kiln/tile/contraction.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool deepenKSlices(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    auto* s = std::get_if<TiledContraction>(&p.schedules[i]);
    if (!s || s->tileK != 16) continue;
    Contraction c = contractionOf(*s, p.loop.kernels[i]);
    const int64_t stages = static_cast<int64_t>(p.loop.kernels[i].stages.size());
    const int64_t roundedK = (c.k + 15) / 16 * 16;
    for (int64_t tk : {64, 32}) {
      if (tk > roundedK || operandSliceBytes(*s, stages, tk) > p.target.staticSharedPerBlock) continue;
      s->tileK = tk;
      changed = true;
      break;
    }
  }
  return changed;
}

}  // namespace kiln::tile
