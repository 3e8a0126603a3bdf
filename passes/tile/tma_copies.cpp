// tile-tma-copies: on targets with TMA (sm_90+), wgmma products streaming swizzled_128b slices whose operands are [row][k]
// views of a buffer (tile::tmaCopyable: a linear layer's activations and weights) copy each slice of each operand with one
// TMA instruction (copy tma): one thread issues cp.async.bulk.tensor per operand per slice, completing on an mbarrier of
// the slice's ring slot, and the block waits on that mbarrier instead of each thread waiting for its own cp.async group.
//
// Why: with cp_async every thread issues its share of 16-byte copies of every slice (a 128 x 64 A slice and a 256 x 64 B
// slice are 3,072 copies, 12 per thread of 256) and computes their addresses, swizzle and bounds; Nsight Compute on
// TinyLlama's bf16 q_proj at 512 tokens (bench/results/ncu, docs/gpu-checks.md) found 42 % of the warps' stall cycles
// in "LG throttle" (the load/store queue full of those copies) and the tensor pipe 25 % busy. A TMA copy moves the whole
// box, applies the 128-byte swizzle and zero-fills outside the matrix by itself.
//
// The schedule keeps its tile, ring depth and wgmma groups in flight (tile-deepen-rings and tile-overlap-wgmma have
// sized them); the ring gains an 8-byte mbarrier per slot. Products whose operands are not such views (attention's
// output read as [k / 64][row][k mod 64], fused operand producers) keep cp_async.
// Preconditions: tile-overlap-wgmma has run. Postcondition: copy tma, or the schedule unchanged.
#include "kiln/tile/contraction.h"
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool tmaCopies(Program& p) {
  if (!p.target.tma || !p.target.wgmma) return false;
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    auto* s = std::get_if<TiledContraction>(&p.schedules[i]);
    if (!s || s->instruction != TiledContraction::Instruction::Wgmma || s->a.copy != TiledContraction::Copy::CpAsync ||
        s->a.layout != TiledContraction::SharedLayout::Swizzled128)
      continue;
    const loop::Kernel& k = p.loop.kernels[i];
    if (!tmaCopyable(p.loop, k, *s)) continue;
    TiledContraction t = *s;
    t.a.copy = t.b.copy = TiledContraction::Copy::Tma;
    if (sharedBytes(t, k) > p.target.maxSharedPerBlock) continue;  // no room for the mbarriers
    *s = t;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
