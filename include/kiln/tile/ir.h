// Tile IR: the GPU schedule of each kernel (DESIGN.md §1). The computation is the Loop-IR kernel; the
// schedule says how its axes map onto the grid, blocks and threads. Every choice is a named knob the
// autotuner can set later.
//
//   thread_per_output   parallel axes flattened onto blockIdx.x*block + threadIdx.x; each thread runs the
//                       whole reduction for its output serially         knobs: block
//   block_per_row       one block per row of a staged kernel (per output point for a plain reduction);
//                       its threads stride over each stage's (flattened) reduction axes, combine partial
//                       results by a shared-memory tree, then stride over the row's outputs   knobs: threads
//   tiled_contraction   matrix products (tile/contraction.h): a block per tile_m x tile_n output tile,
//                       operand slices of tile_k staged in shared memory, a micro_m x micro_n register tile
//                       per thread      knobs: tile_m, tile_n, tile_k, micro_m, micro_n, m_axis, n_axis;
//                       on tensor cores (mma_bf16=1 or mma_f16=1 instead of micro_m/micro_n): 4 warps of
//                       16 x 8 mma tiles over a 32 x 32 or 64 x 64 tile
#pragma once
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "kiln/loop/ir.h"
#include "kiln/support/target.h"

namespace kiln::tile {

enum class Strategy { ThreadPerOutput, BlockPerRow, TiledContraction };
const char* strategyName(Strategy s);

struct Schedule {
  Strategy strategy = Strategy::ThreadPerOutput;
  std::map<std::string, int64_t> knobs;  // "block" (threads per block), "threads" (block_per_output)
  int64_t knob(const std::string& name) const;
};

struct Program {
  loop::Program loop;                // buffers and kernels' computations
  std::vector<Schedule> schedules;   // one per loop kernel
  Target target = defaultTarget();   // the GPU the schedules are for
};

std::string print(const Program& p);
nlohmann::json toJson(const Program& p);
void verify(const Program& p);

// Passes
Program lowerFromLoop(const loop::Program& p, const Target& target = defaultTarget());  // tile-lower-from-loop
bool cooperativeReduce(Program& p);             // tile-cooperative-reduce
// One wave of blocks on an H200 (132 SMs): the tile size is the largest that still gives this many blocks.
constexpr int64_t kTiledContractionMinTiles = 132;
// A product left one thread per output with a reduction this long is tiled (16 x 16) even below a wave.
constexpr int64_t kTiledContractionLongReduction = 512;
bool tileLongReductions(Program& p);            // tile-tile-long-reductions
bool tileContractions(Program& p, int64_t minTiles = kTiledContractionMinTiles);  // tile-tiled-contractions
bool tensorCoreContractions(Program& p);        // tile-tensor-core-contractions
bool enlargeMmaTiles(Program& p, int64_t minTiles = kTiledContractionMinTiles);  // tile-large-mma-tiles
bool fuseOperandProducers(Program& p);          // tile-fuse-operand-producers
// Static shared memory one block may declare (CUDA's limit without opt-in).
constexpr int64_t kStaticSharedBytes = 48 * 1024;
// Shared memory of a tiled contraction's operand slices at depth `tileK`: per stage, f32 [k][row + 1] slices of A
// and B, or with mma_pairs 2-byte [row][k + 8] ones (kernel-lower-from-tile's layouts).
int64_t operandSliceBytes(const Schedule& s, int64_t stages, int64_t tileK);
bool deepenKSlices(Program& p);                 // tile-deep-k-slices
// Operand values a thread may hold in registers for the next slice (tile-prefetch-slices).
constexpr int64_t kPrefetchRegisters = 64;
bool prefetchSlices(Program& p);                // tile-prefetch-slices
bool pairMmaOperands(Program& p);               // tile-mma-operand-pairs

// Reductions at least this long get a block per row (see cooperative_reduce.cpp).
constexpr int64_t kCooperativeReduceMinExtent = 64;
// ... and only while there are fewer outputs than this (about 16 resident warps on each of 132 SMs x 8).
constexpr int64_t kCooperativeReduceMaxOutputs = 16384;

}  // namespace kiln::tile
