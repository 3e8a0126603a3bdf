// tile-deepen-attention-steps: a tensor-core flash-attention warp walks its keys in steps whose every part is a chain of
// dependent work (S by mma.sync, the row maxima through shuffles, the exponentials, P·V), with one or two warps per SM
// sub-partition to hide it. Steps of 128 keys instead of 64 give each warp twice the independent work per step (16
// score tiles, twice the exponentials) for the same chain depth, and halve the steps: the barriers, the maxima's
// shuffles and the rescaling of the output are paid once per 128 keys.
// Rule: bf16/f16 flash attention of 16-row warps without a key split whose keys take 4 steps of 64 or more, when the
// deeper slices still let as many blocks share an SM as the grid puts there (or two): the k and v ring shrinks to the
// slots that allow it (three, else two).
#include <algorithm>

#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool deepenAttentionSteps(Program& p) {
  bool changed = false;
  const Target& t = p.target;
  for (size_t i = 0; i < p.schedules.size(); ++i) {
    auto* f = std::get_if<FlashAttention>(&p.schedules[i]);
    if (!f || flashOnCudaCores(*f) || f->blockKV != 64 || f->warpRows != 16 || f->keySplit != 1) continue;
    const loop::Kernel& k = p.loop.kernels[i];
    if (k.attention->key.extent < 4 * f->blockKV) continue;
    const int64_t perSm = std::min<int64_t>(2, (gridBlocks(*f, k) + t.smCount - 1) / t.smCount);
    FlashAttention deep = *f;
    deep.blockKV = 128;
    for (deep.ring = 3; deep.ring > 2 && perSm * sharedBytes(deep, k) > t.sharedPerSm;) --deep.ring;
    if (sharedBytes(deep, k) > t.maxSharedPerBlock || perSm * sharedBytes(deep, k) > t.sharedPerSm) continue;
    *f = deep;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
