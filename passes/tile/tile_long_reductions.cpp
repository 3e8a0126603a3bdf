// tile-tile-long-reductions: a matrix product that tile-tiled-contractions left one thread per output (too few
// 16 x 16 tiles for a wave of blocks) and that reduces over kTiledContractionLongReduction (512) or more gets
// 16 x 16 tiles anyway. One thread per output runs the whole reduction alone, the threads of a warp reading
// different weight rows: 0.2-0.5 TFLOP/s on the H200 for TinyLlama's k_proj at 128 tokens and Qwen2.5-7B's at 32,
// against 2-6 TFLOP/s for 16 x 16 tiles at similar sizes (bench/results/2026-11-30-h200-tiled.md). Products that
// tile-cooperative-reduce gave a block per output row keep it (2 TFLOP/s for TinyLlama's k_proj at 32 tokens), as
// do matrix-vector products (m or n below 16). 
// Measured on the H200 (2026-12-01, bench/results/2026-12-01-h200-variants.md, each pass alone against the
// default, kiln_variants.py): TinyLlama k_proj at 128 tokens 284 -> 86 us,
// Qwen2.5-7B k_proj at 32 tokens 506 -> 149 us (bf16; f32 alike).
#include "kiln/tile/contraction.h"
#include "kiln/tile/ir.h"

namespace kiln::tile {

bool tileLongReductions(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    if (!std::holds_alternative<PointwiseMap>(p.schedules[i])) continue;
    auto c = findContraction(p.loop.kernels[i]);
    if (!c || c->k < kTiledContractionLongReduction || c->m < 16 || c->n < 16) continue;
    p.schedules[i] = tiledSchedule(*c, 16);
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
