// tile-tensor-core-contractions: moves the multiplication of tiled matrix products whose operands are bf16 (or f16)
// values read from memory onto tensor cores (mma.sync m16n8k16, f32 accumulation; kernel::mma). The block becomes
// 4 warps in a 2 x 2 grid over the tile (32 x 32 or 64 x 64; 16 x 16 tiles keep CUDA cores), each warp a grid of
// 16 x 8 mma tiles; the shared-memory staging of tile-tiled-contractions is unchanged. Operands are converted to
// bf16 (f16) pairs on the way into the tensor cores, which changes no value since they were read from bf16 (f16)
// buffers. Kernels whose operands compute anything (a fused producer, a cast to a narrower type) stay on CUDA cores.
#include "kiln/tile/contraction.h"
#include "kiln/tile/ir.h"

namespace kiln::tile {

bool tensorCoreContractions(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    Schedule& s = p.schedules[i];
    if (s.strategy != Strategy::TiledContraction || scheduledTensorCoreType(s)) continue;
    if (s.knob("tile_m") < 32 || s.knob("tile_n") < 32) continue;
    auto c = findContraction(p.loop.kernels[i], static_cast<int>(s.knob("m_axis")), static_cast<int>(s.knob("n_axis")));
    if (!c) continue;
    auto type = tensorCoreType(p.loop, *c);
    if (!type) continue;
    s.knobs.erase("micro_m");
    s.knobs.erase("micro_n");
    s.knobs[*type == DType::BF16 ? "mma_bf16" : "mma_f16"] = 1;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
