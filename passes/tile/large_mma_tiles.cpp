// tile-large-mma-tiles: tensor-core products with 64 x 64 tiles that still make a wave of blocks with 128 x 128
// tiles get those. The block keeps its 4 warps (2 x 2), so each warp's quarter grows from 32 x 32 to 64 x 64:
// 4 x 8 mma tiles per 16 of k instead of 2 x 4, every A fragment used 8 times instead of 4 and every B fragment 4
// times instead of 2, and each operand element fetched from global memory serves 128 outputs instead of 64. The
// accumulators grow to 128 per thread, so only kernels with one reduction stage qualify (gate/up's two would need
// 256 registers for them alone). Off by default until its kernels have run on a GPU.
#include "kiln/tile/contraction.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool enlargeMmaTiles(Program& p, int64_t minTiles) {
  if (minTiles == 0) minTiles = p.target.smCount;
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    auto* s = std::get_if<TiledContraction>(&p.schedules[i]);
    if (!s || s->instruction != TiledContraction::Instruction::MmaSync || s->tileM != 64 || s->tileN != 64) continue;
    if (p.loop.kernels[i].stages.size() != 1) continue;
    Contraction c = contractionOf(*s, p.loop.kernels[i]);
    if (c.outerPoints * ((c.m + 127) / 128) * ((c.n + 127) / 128) < minTiles) continue;
    s->tileM = s->tileN = 128;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
