// tile-tensor-core-contractions: moves the multiplication of tiled matrix products whose operands are bf16 (or f16)
// values read from memory onto tensor cores (mma.sync m16n8k16, f32 accumulation; kernel::mma). The block becomes
// 4 warps in a 2 x 2 grid over the tile (32 x 32 or 64 x 64; 16 x 16 tiles grow to 32 x 32), each warp a grid of
// 16 x 8 mma tiles; the shared-memory staging of tile-tiled-contractions is unchanged. Operands are converted to
// bf16 (f16) pairs on the way into the tensor cores, which changes no value since they were read from bf16 (f16)
// buffers. Kernels whose operands compute anything (a fused producer, a cast to a narrower type) stay on CUDA cores.
#include "kiln/tile/contraction.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool tensorCoreContractions(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    auto* s = std::get_if<TiledContraction>(&p.schedules[i]);
    if (!s || s->instruction != TiledContraction::Instruction::Ffma) continue;
    auto type = tensorCoreType(p.loop, contractionOf(*s, p.loop.kernels[i]));
    if (!type) continue;
    // 16 x 16 tiles (chosen for a wave of blocks, or for a long reduction) become the smallest tensor-core tile:
    // a quarter of the blocks, each on tensor cores, beats one output per thread on CUDA cores for the skinny
    // products (32 tokens) that get them.
    if (s->tileM < 32 || s->tileN < 32) s->tileM = s->tileN = 32;
    s->instruction = TiledContraction::Instruction::MmaSync;
    s->mmaType = *type;
    s->microM = s->microN = 1;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
