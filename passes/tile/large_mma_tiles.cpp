// tile-large-mma-tiles: tensor-core products with 64 x 64 tiles that still make a wave of blocks with 128 x 128
// tiles get those. The block keeps its 4 warps (2 x 2), so each warp's quarter grows from 32 x 32 to 64 x 64:
// 4 x 8 mma tiles per 16 of k instead of 2 x 4, every A fragment used 8 times instead of 4 and every B fragment 4
// times instead of 2, and each operand element fetched from global memory serves 128 outputs instead of 64. The
// accumulators grow to 128 per thread, so only kernels with one reduction stage qualify (gate/up's two would need
// 256 registers for them alone). Off by default until its kernels have run on a GPU.
#include "kiln/tile/contraction.h"
#include "kiln/tile/ir.h"

namespace kiln::tile {

bool enlargeMmaTiles(Program& p, int64_t minTiles) {
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    Schedule& s = p.schedules[i];
    if (!scheduledTensorCoreType(s) || s.knob("tile_m") != 64 || s.knob("tile_n") != 64) continue;
    if (p.loop.kernels[i].stages.size() != 1) continue;
    auto c = findContraction(p.loop.kernels[i], static_cast<int>(s.knob("m_axis")), static_cast<int>(s.knob("n_axis")));
    if (!c || c->outerPoints * ((c->m + 127) / 128) * ((c->n + 127) / 128) < minTiles) continue;
    s.knobs["tile_m"] = 128;
    s.knobs["tile_n"] = 128;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
