// tile-pipeline-async-copies: tensor-core products whose operands are plain bf16/f16 loads with k contiguous in
// memory (tile::asyncCopyable: linear layers, q·kᵀ) stream their operand slices from global to shared memory with
// 16-byte cp.async into a ring of 2 to 4 slices, and read their mma fragments with ldmatrix.x4.
//
// Without it every step of the tiled schedule loads its slices element by element (2-byte loads), stores them,
// synchronises and multiplies, so the block waits out the full memory latency once per slice with one slice in
// flight. With it, the copies of the next depth - 1 slices are in flight while the block multiplies one: per step
// a thread waits for its oldest group of copies, the block synchronises once (the slice is complete, and the one
// about to be overwritten has been read by everyone), issues the copies of the slice depth - 1 ahead and
// multiplies. A warp's A fragment for one 16 x 16 mma step is one ldmatrix.x4, and B fragments for two 8-column
// mma tiles another (instead of 6 shared loads per mma). An A operand several stages share (a SwiGLU's gate and
// up products both read x) is copied once per slice (tile::aSources).
//
// Slices are 64 deep where K allows (the 48 KB bound tile-deep-k-slices sized them for does not hold for a
// dynamic ring). Depth: the largest of 4, 3, 2 whose ring leaves room for two blocks per SM in the Target's shared memory (so a
// block's barrier never idles the SM) and fits one block's maximum; never more than the slices K has, plus one.
// Preconditions: tile-mma-operand-pairs (row_pairs slices) and tile-deep-k-slices (the slice depth) have run.
// Postcondition: copy cp_async, fragments ldmatrix, pipelineDepth >= 2; the shared memory is dynamic.
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool pipelineAsyncCopies(Program& p) {
  if (!p.target.cpAsync || !p.target.ldmatrix) return false;
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    auto* s = std::get_if<TiledContraction>(&p.schedules[i]);
    if (!s || s->instruction != TiledContraction::Instruction::MmaSync || s->a.copy != TiledContraction::Copy::Plain ||
        s->a.layout != TiledContraction::SharedLayout::RowPairs || !asyncCopyable(p.loop, p.loop.kernels[i], *s))
      continue;
    const loop::Kernel& k = p.loop.kernels[i];
    const Contraction c = contractionOf(*s, k);
    // tile-deep-k-slices sized tile_k for 48 KB of static shared memory; the ring is dynamic, so slices 64 deep
    // (the most one step's copies and fragments are unrolled for) where the reduction has them.
    TiledContraction piped = *s;
    if (piped.tileK < 64 && c.k >= 64) piped.tileK = 64;
    const int64_t depth = ringDepth(p.target, piped, c);
    if (depth == 0) continue;  // the schedule stays as it was, tile_k included
    piped.a.copy = piped.b.copy = TiledContraction::Copy::CpAsync;
    piped.fragments = TiledContraction::Fragments::Ldmatrix;
    piped.pipelineDepth = depth;
    *s = piped;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
