// What follows from a schedule and its kernel: threads, grid, shared memory, operand-slice layouts, registers.
// The single source of these facts for the Tile passes, the Tile-IR verifier and printer, and
// kernel-lower-from-tile: a pass sizes a schedule with the same numbers the lowering will realise.
#pragma once
#include "kiln/support/index_expr.h"
#include "kiln/tile/contraction.h"
#include "kiln/tile/ir.h"

namespace kiln::tile {

// a / b rounded up (a >= 0, b > 0).
constexpr int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t threadsPerBlock(const Schedule& s);
int64_t gridBlocks(const Schedule& s, const loop::Kernel& k);
// Shared memory one block declares, in bytes (every slice of a pipelined product's ring included, and a tma ring's
// mbarriers, kMbarrierBytes per slot).
int64_t sharedBytes(const Schedule& s, const loop::Kernel& k);
constexpr int64_t kMbarrierBytes = 8;
// The schedule's shared memory is dynamic (launch-time size, up to the Target's maxSharedPerBlock): pipelined
// (cp_async, tma) products. Otherwise it is static, within staticSharedPerBlock.
bool dynamicShared(const Schedule& s);

// Row reductions: the rows of k (row-axis points) and the elements of each row's write.
int64_t rowsOf(const loop::Kernel& k);
int64_t rowWidth(const loop::Kernel& k);
// Shared floats a row reduction uses to combine partial results: one per thread (tree) or per warp (shuffles).
int64_t combineSlots(const RowReduction& r);

// Flash attention. Blocks along the query axis (ceil(queries / blockQ)); the grid is that times the points of the other
// row axes, the query block fastest.
int64_t flashQueryBlocks(const FlashAttention& f, const loop::Kernel& k);
// The query rows one block takes (FlashAttention::blockRows, else blockQ): the stride between its blocks.
inline int64_t flashRowsTaken(const FlashAttention& f) { return f.blockRows > 0 ? f.blockRows : f.blockQ; }
// Query blocks over all rows (batch, heads): the grid of one block per query block.
int64_t flashQueryBlocksInAll(const FlashAttention& f, const loop::Kernel& k);
// Shared slices in the operand type, rows of the row stride (width + 16 bytes: 16-byte aligned rows whose 8 rows of one
// ldmatrix fall in distinct banks): q [blockQ][D], and per ring slot (FlashAttention::ring) k [blockKV][D] and v [blockKV][E].
// f32 (CUDA cores): rows padded by 4 (16 bytes, 16 consecutive rows in two bank-disjoint runs of 8), and p
// [blockQ][blockKV + 4] f32, the probabilities of a step.
struct FlashSlices {
  int64_t q, k, v;                  // elements of each slice
  int64_t depthStride, widthStride;  // elements per row of the q and k slices, of the v slice
  int64_t combine;                  // keySplit > 1: f32 values the warps of keys 1.. leave for those of keys 0
  int64_t p = 0, pStride = 0;       // f32: the probabilities' slice and its row stride
};
// Query rows of a flash block whose products are one warpgroup's wgmma (FlashAttention::scoresByWgmma, valuesByWgmma):
// wgmma's m.
constexpr int64_t kFlashWgmmaRows = 64;
// A flash schedule on CUDA cores (f32 operands; FlashAttention::mmaType).
inline bool flashOnCudaCores(const FlashAttention& f) { return f.mmaType == DType::F32; }
// A tensor-core flash block that is one warpgroup (kFlashWgmmaRows rows in 16-row warps, no key split): what either
// product by wgmma needs of the schedule (besides sm_90a and the operands' extents).
inline bool flashOneWarpgroup(const FlashAttention& f) {
  return !flashOnCudaCores(f) && f.blockQ == kFlashWgmmaRows && f.warpRows == 16 && f.keySplit == 1;
}
// Tensor cores: whether a warp keeps its q fragments in registers for the whole key walk (loaded once by ldmatrix) or
// loads them again at every step (two row groups at head dims above 64, where held fragments would crowd out the
// accumulators: 32 registers per row group and 64 of depth).
inline bool flashQueriesResident(const FlashAttention& f, int64_t depth) { return f.warpRows / 16 * depth <= 128; }
// Accumulator registers a flash thread holds for the whole walk: a key step's scores (twice with scoresAhead), the
// outputs and q's fragments (CUDA cores: two rows' scores and outputs, a step of 4 depths' q and k vectors). The
// verifier bounds it by the Target's registers; tile-attention-scores-ahead keeps it at 192.
inline int64_t flashAccumulators(const FlashAttention& f, int64_t depth, int64_t width) {
  if (flashOnCudaCores(f)) return 2 * (f.blockKV / 16) + 2 * 4 * ((width + 63) / 64) + 4 * (2 + f.blockKV / 16);
  return f.warpRows / 16 * ((f.scoresAhead ? 2 : 1) * f.blockKV / f.keySplit / 2 + width / 2) +
         (flashQueriesResident(f, depth) ? f.warpRows / 16 * depth / 4 : 4);
}
// Values one thread hands over when warps sharing rows combine: its two rows' maximum and sum, its width / 2 outputs.
constexpr int64_t flashCombineValues(int64_t width) { return 4 + width / 2; }
FlashSlices flashSlices(const FlashAttention& f, const loop::Kernel& k);
// FlashAttention::keyBlocks: the f32 values one thread of a block leaves for the last block of its query block (its
// rows' maxima and sums, then its outputs), and the partials buffer's elements for the whole grid (values per thread
// x threads x blocks; a block's value i of thread t at (block * values + i) * threads + t).
int64_t flashPartialValues(const FlashAttention& f, const loop::Kernel& k);
int64_t flashPartialsElements(const FlashAttention& f, const loop::Kernel& k);
constexpr int64_t kFlashMaxKeyBlocks = 16;  // blocks sharing a query block's keys (the last merges them one by one)

// Tiled contractions.
// The contraction a schedule multiplies (its m and n axes); an internal error if k is not one.
Contraction contractionOf(const TiledContraction& s, const loop::Kernel& k);
int64_t tilesM(const TiledContraction& s, const Contraction& c);
int64_t tilesN(const TiledContraction& s, const Contraction& c);
// The type of the operand slices in shared memory: f32, or with RowPairs the tensor cores' operand type.
DType sliceType(const TiledContraction& s, const TiledContraction::Operand& o);
// Elements of one slice of `rows` rows at depth tileK in the operand's layout (padding included):
// KMajorF32 [k][rows + 1]; RowPairs [rows][k + kPairPad]; CoreMatrices [rows / 8][k / 8][8][8]; Swizzled128 [rows][64];
// RowsF32 [rows][k + kF32RowPad].
constexpr int64_t kPairPad = 8;
constexpr int64_t kF32RowPad = 4;
int64_t sliceElements(const TiledContraction::Operand& o, int64_t rows, int64_t tileK);
// Where element (k offset kk, row rr) of a slice lies.
Idx sliceSlot(const TiledContraction::Operand& o, const Idx& kk, const Idx& rr, int64_t rows, int64_t tileK);
// Bytes of every stage's A and B slices at depth tileK, one slice each (a pipelined ring holds pipelineDepth).
int64_t operandSliceBytes(const TiledContraction& s, int64_t stages, int64_t tileK);
// Pipelined (cp_async) products copy an A operand that several stages share (a SwiGLU's gate and up both read x)
// once: aSource[st] is the first stage whose A is the same expression as stage st's.
std::vector<size_t> aSources(const Contraction& c);
// Bytes of one slot of a pipelined product's ring: each distinct A slice once, every stage's B slice.
int64_t ringSlotBytes(const TiledContraction& s, const Contraction& c);
// What ring sizing counts per slot: ringSlotBytes, plus for wgmma products the mbarrier a tma ring keeps per slot
// (kMbarrierBytes; reserved before tile-tma-copies decides, so that a ring sized to fill a block's shared memory still
// takes tma).
int64_t ringSlotBudget(const TiledContraction& s, const Contraction& c);
// Registers a wgmma product's thread holds besides its accumulators (addresses, descriptors, loop state): ptxas gave the
// H200's 128 x 144 tiles 98 registers for 72 accumulators (measurements: docs/history.md, "A producer warp").
constexpr int64_t kRegistersBesideAccumulators = 32;
// Whether a wgmma product's registers (accumulators plus kRegistersBesideAccumulators, allocated 8 at a time) leave no
// room for a second block on an SM: 128 x 256 tiles hold 128 accumulators per thread.
bool oneBlockPerSm(const Target& target, const TiledContraction& s, const Contraction& c);
// Whether a product's flops take the Target's tensor cores (at tensorCoreFlopsPerSecond) longer than its operands and
// output, each once, take its memory (at memoryBandwidthGBs).
bool computeBound(const Target& target, const TiledContraction& s, const Contraction& c);
// Whether each SM runs at most one of the product's blocks at a time: one wave of blocks, or registers (oneBlockPerSm)
// or shared memory (Target::kReservedSharedPerBlock reserved per block) for one block only.
bool aloneOnSm(const Target& target, const TiledContraction& s, const loop::Kernel& k);
// Slices of the reduction a block walks, at least, for tile-specialize-warps' producer warp to pay on a compute-bound
// product alone on its SM (fewer measured slower; passes/tile/specialize_warps.cpp). tile-shape-products' model counts it.
constexpr int64_t kMinSpecializedSlices = 32;
// Split products (tile-shape-products' splitProduct): whether kernel i is a matrix product of one stage whose first
// parallel axis splits its reduction into parts (extent 2 or more, neither m nor n) into an f32 buffer [parts][output],
// and kernel i + 1 is the pointwise map that adds those partials (its parallel axes kernel i's but the first, the only
// kernel reading that buffer). Then the output tiles of one part, and the blocks of one tile, come from splitParts.
bool addsPartialsOf(const Program& p, size_t i);
struct SplitParts {
  int64_t parts = 0;         // S: the blocks of one output tile
  int64_t tilesPerPart = 0;  // the grid's blocks / S: block b takes part b / tilesPerPart of tile b mod tilesPerPart
};
SplitParts splitParts(const TiledContraction& s, const loop::Kernel& k);
// A stream-K product's walk (TiledContraction::streamBlocks): `units` places of a cluster's tiles (tiles / cluster), each
// `slices` slices of tile_k deep, `steps` = units x slices in all, shared by `clusters` clusters; a cluster walks at most
// `longest` steps (ceil(steps / clusters)) and a tile's slices are walked by at most `pieces` clusters.
struct StreamK {
  int64_t units = 0, slices = 0, steps = 0, clusters = 0, longest = 0, pieces = 0;
};
StreamK streamK(const TiledContraction& s, const Contraction& c);
// Slices in the ring of a cp_async product: the largest of 4, 3, 2 whose ring leaves room for two blocks per SM in the
// Target's shared memory and fits one block's maximum, never more than the reduction's slices plus one; 0 if none fits.
// A block alone on its SM (oneBlockPerSm) takes deepestRing.
int64_t ringDepth(const Target& target, const TiledContraction& s, const Contraction& c);
// The deepest ring, 2 to kMaxRingDepth slots and never more than the reduction's slices plus one, that one block's
// maximum shared memory holds; 0 if not even 2 slots fit.
int64_t deepestRing(const Target& target, const TiledContraction& s, const Contraction& c);
// How many slices ahead of the one being multiplied a ring's copies run: pipelineDepth - 1 less the wgmma groups in flight
// (their slots are still read when the next copies go out), but pipelineDepth - 1 with a producer warp (it refills a slot
// as soon as the warpgroups release it, not a step later).
int64_t copiesAhead(const TiledContraction& s);
// Accumulator registers per thread that holds any, and the registers RegisterPrefetch adds (per operand slice,
// ceil(rows * tileK / threads) values).
int64_t accumulatorRegisters(const TiledContraction& s, int64_t stages);
int64_t prefetchRegisters(const TiledContraction& s, int64_t stages);
// The tensor-core operand type the schedule multiplies in, if it uses tensor cores.
std::optional<DType> scheduledTensorCoreType(const Schedule& s);

}  // namespace kiln::tile
