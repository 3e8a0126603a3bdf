// tile-warpgroup-products: on sm_90a, tensor-core products whose operands can stream by cp.async (tile::asyncCopyable:
// k-contiguous bf16/f16 loads, as linear layers and q·kᵀ read them) multiply with wgmma: one warpgroup (128 threads)
// per 64 rows of the block tile issues wgmma.mma_async m64n{tile_n}k16, which reads both operands from shared
// memory itself.
//
// Why: with mma.sync every warp first moves its fragments from shared memory into registers (an ldmatrix.x4 per
// 16 x 16 of A, one per 16 x 16 of B), and a 64 x 64 warp tile holds 128 accumulators plus the fragments; the
// Hopper tensor cores run at full rate only through wgmma, and asynchronously, so the warps' issue slots stay free
// for the copies of the next slices.
//
// The schedule this pass writes is complete: a 64 x 64 tile (tile-shape-products then sizes it with its warpgroup
// model), slices 64 deep streamed by 16-byte cp.async through a ring of tile::ringDepth slots, each slice in the
// 128-byte swizzle (swizzled_128b: [row][64], the 16-byte chunks of a row permuted by the row within groups of 8 rows,
// so neither the copies nor the tensor cores' reads meet bank conflicts); when K is shorter than 64, slices as deep as
// K rounded up to 16 in plain core_matrices ([row / 8][k / 8][8][8], whose 8 x 8 core matrices wgmma's descriptors
// locate by their distance in k and in rows). The later mma.sync passes (operand pairs, deep slices, the cp.async ring) leave it
// alone. Per slice the lowering has each thread wait for its copies and fence them for the async proxy, the block
// synchronise, the copies of a later slice issued, then every warpgroup issue tile_k / 16 wgmmas per stage, commit
// them and wait for them before the next slice's barrier (nothing overwrites a ring slot a pending wgmma reads).
// Preconditions: tile-tensor-core-contractions (instruction mma.sync, the operand type) and
// tile-fuse-operand-producers (the operands are final). Postcondition: instruction wgmma, copy cp_async,
// core_matrices slices, threads = tile_m / 64 * 128.
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool warpgroupProducts(Program& p) {
  if (!p.target.wgmma || !p.target.cpAsync) return false;
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    auto* s = std::get_if<TiledContraction>(&p.schedules[i]);
    if (!s || s->instruction != TiledContraction::Instruction::MmaSync || s->a.copy != TiledContraction::Copy::Plain) continue;
    const loop::Kernel& k = p.loop.kernels[i];
    const Contraction c = contractionOf(*s, k);
    TiledContraction w = *s;
    w.instruction = TiledContraction::Instruction::Wgmma;
    w.tileM = w.tileN = 64;
    w.tileK = std::min<int64_t>(64, (c.k + 15) / 16 * 16);
    // 64 deep: 128-byte rows in the 128-byte swizzle (no bank conflicts); shorter: plain core matrices.
    w.a = w.b = TiledContraction::Operand{TiledContraction::Copy::CpAsync, w.tileK == 64 ? TiledContraction::SharedLayout::Swizzled128
                                                                                      : TiledContraction::SharedLayout::CoreMatrices};
    w.fragments = TiledContraction::Fragments::Elements;  // none: wgmma reads shared memory itself
    if (!asyncCopyable(p.loop, k, w)) continue;
    w.pipelineDepth = ringDepth(p.target, w, c);
    if (w.pipelineDepth == 0) continue;
    *s = w;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
