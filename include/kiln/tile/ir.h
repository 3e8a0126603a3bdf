// Tile IR: the GPU schedule of each kernel (DESIGN.md §1). The computation is the Loop-IR kernel; the schedule
// is a typed struct per strategy holding every decision a CUDA engineer would make by hand. Tile passes decide
// by writing its fields; kernel-lower-from-tile only carries a schedule out. Quantities that follow from a
// schedule and its kernel (threads per block, grid, shared-memory bytes, slice layouts) are computed in one
// place, tile/layout.h, which the passes, the verifier, the printer and the lowering all use.
//
//   PointwiseMap     the output's points flattened onto blockIdx.x*threads + threadIdx.x; each thread computes
//                    `vector` consecutive points of the innermost axis and runs any reduction serially
//   RowReduction     `threadsPerRow` threads (a warp or a whole block) per row of a kernel with reduction
//                    stages: they split each stage's reduction, combine by warp shuffles (and shared memory
//                    across warps) or by a shared-memory tree, then split the row's outputs
//   TiledContraction a matrix product (tile/contraction.h): a block per tileM x tileN output tile, operand
//                    slices of tileK staged in shared memory, multiplied on CUDA cores (a microM x microN
//                    register tile per thread) or on tensor cores (mma.sync m16n8k16 per warp, wgmma per
//                    warpgroup); with cp_async copies the slices stream through a ring of pipelineDepth buffers
//   FlashAttention   an attention kernel (softmax over keys of q·k products, weighting v) in one pass over the keys
#pragma once
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "kiln/loop/ir.h"
#include "kiln/tile/contraction.h"
#include "kiln/support/target.h"

namespace kiln::tile {

struct PointwiseMap {
  int64_t threads = 256;  // per block, a multiple of the warp size
  int64_t vector = 1;     // consecutive points of the innermost output axis per thread, stored with one access
  // Vectors one thread computes, `threads` vectors apart (coalesced); all their loads are issued before any of
  // them is computed, so each thread has that many loads in flight. Kernels without reductions only.
  int64_t vectorsPerThread = 1;
};

struct RowReduction {
  enum class Combine {
    SharedTree,   // partials in shared memory, halved with a barrier per step
    WarpShuffle,  // butterfly shuffles within each warp, then the warps' totals through shared memory
  };
  int64_t threadsPerRow = 256;  // a power of two up to 1024; below 32 (part of a warp) only with WarpShuffle
  int64_t rowsPerBlock = 1;     // rows one block handles side by side (threadsPerRow threads each)
  int64_t vector = 1;           // consecutive elements of the row's innermost axis per access
  Combine combine = Combine::SharedTree;
  // The row's elements are loaded once into registers (each thread its share) and serve every stage and the
  // write; otherwise every stage and the write read memory again.
  bool rowInRegisters = false;
  // Rows of one point whose every stage reduces one axis (a product's one output: a decoder step's matrix-vector
  // products): each thread walks the axis reductionVector consecutive elements at a time, the loads of those elements
  // that are consecutive in memory issued as 16-byte vectors. 1: one element at a time. Only with vector 1.
  int64_t reductionVector = 1;
  // With reductionVector > 1 and stages that are independent sums or maxima over one axis of one extent (none reads
  // another's total: a gate and an up projection, a norm's sum of squares beside the product its total scales): one
  // walk of the axis accumulates every stage, each vector of an operand they share loaded once. Otherwise each stage
  // walks the axis in turn.
  bool stagesTogether = false;
};

struct TiledContraction {
  enum class Instruction {
    Ffma,     // CUDA cores, f32 fused multiply-add, microM x microN outputs per thread
    MmaSync,  // tensor cores, mma.sync.aligned.m16n8k16 with f32 accumulation, a 2 x 2 grid of warps
    // tensor cores, wgmma.mma_async m64n{tile_n}k16 with f32 accumulation (sm_90a): one warpgroup (128 threads) per 64
    // rows of the tile, both operands read by the tensor cores straight from core_matrices slices of a cp_async ring
    Wgmma,
  };
  enum class SharedLayout {
    KMajorF32,    // [k][row + 1] f32: threads reading one k broadcast, copies spread over banks
    RowPairs,     // [row][k + 8] in the operand type: mma registers read as aligned 32-bit pairs
    // [row / 8][k / 8][8][8] in the operand type: 8 x 8 core matrices of 128 contiguous bytes, k-major, no swizzle,
    // as wgmma's shared-memory descriptors describe them (leading offset 128 B, stride offset 16 * tile_k B)
    CoreMatrices,
    // [row][64] in a 16-bit operand type, 128-byte rows whose 16-byte chunk c of row r lies at chunk c ^ (r mod 8): the
    // 128-byte swizzle of wgmma's descriptors (tile_k 64), free of bank conflicts for the copies and the tensor cores
    Swizzled128,
    // [row][k + 4] f32, k contiguous as in memory: 16-byte cp.async copies land as they are read, and a thread reads four k
    // of one row with one 16-byte load (CUDA-core products streaming f32 operands); the padding puts 8 consecutive rows'
    // 16-byte chunks in distinct banks
    RowsF32,
  };
  enum class Copy {
    Plain,             // each step: load from global memory, store to shared, barrier, multiply, barrier
    RegisterPrefetch,  // the next slice is loaded into registers while the block multiplies this one
    // 16-byte cp.async straight from global to shared memory into a ring of pipelineDepth slices: the copies
    // of the next pipelineDepth - 1 slices are in flight while the block multiplies one (operands that are plain loads
    // of the multiplied type, k contiguous in memory: bf16/f16 for tensor cores, f32 in rows_f32 slices for ffma;
    // both operands alike)
    CpAsync,
    // TMA (sm_90+, wgmma products in swizzled_128b slices): the same ring, but one thread copies each operand's whole slice
    // with one cp.async.bulk.tensor per slice, completing on an mbarrier per ring slot that the block waits on (operands
    // that are [row][k] views of a buffer, tile::tmaCopyable); no thread spends issue slots or registers on copies
    Tma,
  };
  // How a warp reads its mma fragments from the slices.
  enum class Fragments {
    Elements,  // one shared load per element (k_major_f32 slices)
    Pairs,     // one 32-bit load per pair of elements (row_pairs slices)
    Ldmatrix,  // ldmatrix.x4: four 8x8 matrices per instruction (row_pairs slices, rows 16-byte aligned)
  };
  struct Operand {
    Copy copy = Copy::Plain;
    SharedLayout layout = SharedLayout::KMajorF32;
  };
  int mAxis = -1, nAxis = -1;  // positions in the kernel's parallel axes
  int64_t tileM = 0, tileN = 0, tileK = 16;
  Instruction instruction = Instruction::Ffma;
  DType mmaType = DType::BF16;  // MmaSync: the operands' type (bf16 or f16)
  int64_t microM = 1, microN = 1;  // Ffma
  Operand a, b;
  Fragments fragments = Fragments::Elements;  // MmaSync
  int64_t pipelineDepth = 1;  // slices in the shared ring (CpAsync, Tma: 2 to kMaxRingDepth; otherwise 1)
  // Wgmma: groups of wgmmas left in flight across the k loop's barrier, 0 or 1 (tile-overlap-wgmma). With 1 each slice's
  // wgmmas wait only for the slice before's, and the copies run pipelineDepth - 2 slices ahead (the slot of the slice
  // before is still being read when the next copies go out).
  int64_t mmaInFlight = 0;
  // Wgmma products whose stages all read one A (a SwiGLU's gate and up both read x): each ring slot holds the stages'
  // B slices one after another, and one wgmma m64n{stages * tile_n} per 16 of k multiplies them all (A read from
  // shared memory once, half the wgmmas of two stages; its accumulators are the stages' in order).
  bool stackedB = false;
  // Tma products with a producer warp: blocks per thread-block cluster (1, 2, 4 or 8; tile-multicast-operands). A
  // cluster is that many blocks consecutive in n (the same tile row, the same other output axes): they read the same A
  // slices, so block r of the cluster copies rows [r, r + 1) * tile_m / cluster of each and multicasts them to all, and
  // each A slice leaves L2 once per cluster instead of once per block. A block's slot is only refilled once every
  // consumer warp of the cluster is done with it (each releases it in every block of the cluster).
  int64_t cluster = 1;
  // Clusters that multicast B instead of A (tile-multicast-operands, where a B slice is the larger): the cluster's blocks
  // are consecutive in m instead (the same tile column: block b takes tile column (b / C) mod tiles_n and tile row
  // C ((b / C) div tiles_n) + b mod C), they read the same B slices, and block r copies rows [r, r + 1) * tile_n /
  // cluster of each into all of them.
  bool multicastB = false;
  // Tma products (tile-specialize-warps): one warp more after the warpgroups, the producer, whose first lane issues every
  // slice's copies; the warpgroups, the consumers, only wait for a slot's copies, multiply and release the slot (an
  // mbarrier `empty` per slot, one arrival per consumer warp of the cluster) while the producer waits for that release
  // before it refills the slot. No block barrier in the k loop: the warpgroups run apart, and one wgmma group stays in
  // flight (mmaInFlight 1) while the copies run pipelineDepth - 1 slices ahead of the one multiplied.
  bool producerWarp = false;
  // Products with a producer warp (tile-unroll-rings): the k loop walks rounds of pipelineDepth steps, step s of a round
  // multiplying ring slot s, so that slots and mbarrier parities are constants or one per round instead of each step's
  // `slice mod depth` and `slice / depth` (and the wgmma descriptors computed from them).
  bool unrollRing = false;
  int counters = -1;  // streamBlocks: the program's counters buffer
  // Tma products with a producer warp, one stage or stacked, no other output axes (tile-stream-k-products): a persistent
  // grid of streamBlocks blocks, clusters of `cluster`, one wave. The product's work is U x S steps (U units: a cluster's
  // tiles at one place, S slices of tile_k each); walking steps in the order (unit, slice), cluster g takes the steps
  // [floor(r I / G), floor((r + 1) I / G)) with r = G - 1 - g (G clusters, I = U x S), so every cluster walks its share
  // of the reduction whatever the tile count. A block whose walk starts inside a tile stores its partial tile (f32, buffer
  // `partials`, a tile per block) and adds one to the tile's counter (release); the block that walked the tile's first
  // slice waits for the count of the others (acquire), adds their partials in the order of their walks and applies the
  // epilogue. A tile's other blocks have lower block indices (r counts down), so they start no later than the one waiting.
  int64_t streamBlocks = 0;
  int partials = -1;  // streamBlocks: the program's f32 buffer of partial tiles
  // tile-shape-products chose the tile to be walked stream-K (its rule, or a --product-shapes entry's "stream_k"):
  // tile-stream-k-products makes the persistent grid where the rest of the schedule allows it.
  bool streamK = false;
  // Why the tile has this shape, when a model chose it (tile-shape-products): printed, never read by the lowering.
  std::string model;
  // Blocks walk the tiles with n fastest, then m, then the other output axes (batch, heads).
};

// An attention kernel (loop::Kernel::attention) as flash attention on tensor cores (mma.sync m16n8k16, sm_80+): a block of
// blockQ / warpRows warps holds blockQ query rows of one point of the other row axes (batch, head), each warp warpRows
// rows (16, or 32 as two row groups of 16 that share every k and v fragment the warp loads). The block
// walks the keys in steps of blockKV: k and v slices of blockKV keys stream by 16-byte cp.async through a ring of `ring`
// shared slices, ring - 1 steps ahead of the one the block works on; per step each warp multiplies its q rows (fragments loaded
// once by ldmatrix) with the k slice into score accumulators, applies the score expression (scale, masks) and the online
// softmax (running maximum and sum per row, kept by the 4 lanes of a quad through shuffles; the accumulators rescaled
// when the maximum grows), and multiplies the probabilities, still in registers as the A operand, with the v slice
// (ldmatrix.trans). keyFrom / keyTo (loop::keyBounds): the steps cover only keys some row of the block may see. With
// keySplit > 1 several warps share the rows and split each step's keys.
struct FlashAttention {
  int queryAxis = -1;   // position in the kernel's parallel axes
  int64_t blockQ = 64;  // query rows per block (16, 32, 64 or 128), warpRows per warp
  // Query rows a block takes along the query axis (0: blockQ). tile-share-kv-heads sets fewer: the query axis is then
  // the heads axis of a one-token step, and a block takes the blockRows query heads that share one KV head (k and v
  // the same rows for all of them: loop::sharedAcrossRows) as the first blockRows of its blockQ rows, so each KV head's
  // keys and values are read once per group, not once per query head; its other rows compute on the next heads' q and
  // are not stored. No compile-time key bounds, pairing, packing or wgmma with it.
  int64_t blockRows = 0;
  // Query rows per warp: 16 (one m16 row group), or 32: two row groups whose mma.sync share each k and v fragment, twice
  // the independent tensor-core and exp work between a step's barriers. Tensor cores, no key split. No pass chooses 32
  // (it was slower on the H200 wherever measured: docs/pipeline.md); schedules set by hand and the tests still may.
  int64_t warpRows = 16;
  int64_t blockKV = 64;  // keys per step: 64, or 128 on tensor cores (tile-deepen-attention-steps); f32 also 32
  // Warps sharing each 16 query rows (1, 2 or 4): warp h of a row group takes keys [h, h + 1) * blockKV / keySplit of every
  // step, with its own running maximum, sum and accumulators, combined through shared memory at the end: a shorter chain
  // of dependent steps per warp for blocks that walk many, but each warp rescales its whole output for its share of the
  // keys. Measured slower on the H200 where tried (see passes/tile/lower_from_loop.cpp), so the rule keeps 1.
  int64_t keySplit = 1;
  // Block b of a row (batch, head) takes query blocks QB - 1 - b and then b (tile-balance-attention): under a causal mask
  // every block then walks about the same number of steps. The grid has ceil(QB / 2) blocks per row.
  bool pairBlocks = false;
  // Grid order (tile-interleave-attention-rows; unpaired blocks of a causal mask): block b takes row (batch, head)
  // b mod R and the (b div R)-th query block of the order QB - 1, QB - 2, .., QB - H (H = ceil(QB / 2)), then 0, 1, ..,
  // QB - H - 1: every row's heaviest blocks first, then the lightest. A GPU that deals a grid's blocks out to its SMs in
  // turn gives an SM's second block from the light half. Without it: block b takes row b div QB, query block
  // QB - 1 - b mod QB (each row's blocks heaviest first, one row after another).
  bool rowsInner = false;
  // Causal, unpaired, N query blocks in all with S < N <= 2 S for S = packedPairs (the target's SMs;
  // tile-pack-attention-pairs): S thread blocks of two groups (Kernel IR Kernel::groups), so that the two query blocks
  // of a thread block share its SM, dealt so that every SM walks about the same number of key steps. List the query
  // blocks heaviest first (rows inner: item i is row i mod R, query block QB - 1 - i div R) and let M = N - S: thread
  // block b < M pairs item S - M + b with item N - 1 - b (the lighter of the heavy ones with the lightest), thread block
  // b >= M runs item b - M alone (the heaviest), its second group idle. Where the GPU chooses which separate blocks
  // share an SM, it did not pair them this way on the H200 (bench/probes/block_placement.cu: 28 heads at 512 tokens,
  // 224 blocks, left up to 10 key steps on an SM where the mean is 7.6; dealt so, at most 8). 0: not packed.
  int64_t packedPairs = 0;
  // Tensor cores: each row's running sum of probabilities accumulates in one more mma.sync per 16 keys, the packed
  // probabilities times a fragment of ones (tile-sum-attention-rows-by-mma): one instruction where a thread would add
  // 16 of its probabilities, the sum already over the 4 lanes sharing the row; it adds the bf16-rounded probabilities the
  // P·V product multiplies, not the f32 ones.
  bool rowSumsByMma = false;
  // sm_90a, one warpgroup of 16-row warps (block_q 64, no key split): S = q · kᵀ of a step is one
  // wgmma.mma_async m64n{block_kv}k16 per 16 of depth from shared memory (tile-attention-scores-by-wgmma), q and k
  // kept there in rows of 64 depths under the 128-byte swizzle (depth a multiple of 64), instead of every warp loading
  // q and k fragments by ldmatrix and issuing block_kv / 8 mma.sync per 16 of depth; the accumulators land in the layout
  // the softmax and P·V read.
  bool scoresByWgmma = false;
  // sm_90a, one warpgroup of 16-row warps (block_q 64, no key split), an output row of 64 to 256 values, a multiple
  // of 64 (tile-attention-values-by-wgmma): O += p · v of a step is one wgmma.mma_async m64n{width}k16 per 16 keys with
  // A from registers (p's packed pairs, the mma A fragment per warp) and v from shared memory in rows of 64 columns
  // under the 128-byte swizzle (wgmma's transposed B), instead of every warp loading v's fragments by
  // ldmatrix.trans and issuing width / 8 mma.sync per 16 keys: v leaves shared memory once per block, not once per
  // warp, and the tensor cores take the product off the warps' issue slots. Issued and waited for at the step's end.
  bool valuesByWgmma = false;
  // Tensor cores, no key split, two ring slots (tile-attention-scores-ahead): each step first multiplies the next step's
  // scores, S' = q · k'ᵀ into a second set of score accumulators, and only then runs this step's softmax and P·V on the
  // scores the step before multiplied: the warp's exponentials and shuffles issue while the tensor cores work on S',
  // where they waited for S (by mma.sync spread through the softmax; by wgmma one group issued before it and waited for
  // after P·V). k's copies run two steps ahead and v's one (the same two slots each: a step reads k of the next step and
  // v of its own).
  bool scoresAhead = false;
  int64_t ring = 2;  // ring slots of k and v (2 to 4): the copies of ring - 1 steps ahead are in flight during a step
  // The operands' type: bf16/f16 multiply on tensor cores as above; f32 on CUDA cores (ffma, no TF32): a block of
  // 8 x blockQ threads, 16 lanes of a warp per pair of rows (r, r + blockQ / 2), lane t of them computing keys t, t + 16,
  // t + 32, t + 48 of every step (q and k read as 16-byte vectors of 4 depths), writing its probabilities to a shared
  // [blockQ][blockKV + 4] slice, and multiplying them with v into the value columns 4 t .. 4 t + 3 (+ 64, + 128, ...);
  // no key split.
  DType mmaType = DType::BF16;
  std::optional<int64_t> keyFrom, keyTo;  // query row i sees keys [i + keyFrom, i + keyTo) only
  // Flash-decoding (tile-split-attention-keys): keyBlocks thread blocks share each query block, block s walking the
  // s-th of keyBlocks nearly equal runs of the steps the block's rows may see (known at run time where the keys' limit
  // is): few query rows over many keys then fill the GPU, where one block per query block walked every step alone. Each
  // block stores its rows' running maximum, sum and unnormalised outputs (`partials`, f32, tile::flashPartialsElements)
  // and takes a ticket at the query block's counter (`counters`, i64, one per query block); the last to arrive merges
  // the keyBlocks partials, rescaled to their common maximum, and stores the output. A block whose run is empty stores
  // a maximum of -inf and nothing else counts from it. No pairing, packing or output staging with it.
  int64_t keyBlocks = 1;
  int partials = -1;  // keyBlocks > 1: the program's f32 buffer of partial rows
  int counters = -1;  // keyBlocks > 1: the program's counters buffer
};

using Schedule = std::variant<PointwiseMap, RowReduction, TiledContraction, FlashAttention>;
const char* strategyName(const Schedule& s);
// One line: every field, and what follows from it for kernel k (threads, grid, shared bytes).
std::string describe(const Schedule& s, const loop::Kernel& k);
// Every field of the schedule under its key (the keys of the printed schedule line; kiln/tile/parser.h), and "strategy".
nlohmann::json toJson(const Schedule& s);

// A matrix product's shape chosen outside kiln's models (`--product-shapes FILE`, e.g. a measured table): products
// multiplying `type` operands (f32 on CUDA cores, bf16/f16 on tensor cores) of m x n x k with `stages` stages (and
// `outer` points of their other axes, if given) take this tile and split, and with perStage their stages run as separate
// products (tile-stream-ffma-products). tile-shape-products and tile-stream-ffma-products use an entry instead of their
// model's choice when it is one of the candidates they consider, and refuse it in one line otherwise.
struct TabledShape {
  DType type = DType::F32;
  int64_t m = 0, n = 0, k = 0, stages = 1;
  std::optional<int64_t> outer;
  int64_t tileM = 0, tileN = 0, split = 1;
  bool perStage = false;
  bool streamK = false;  // the tile walked stream-K (TiledContraction::streamK)
  std::string where;  // "FILE entry I", for messages
};
// Reads a --product-shapes file: {"products": [{"type": "f32", "m": 128, "n": 5632, "k": 2048, "stages": 2, "tile_m": 128,
// "tile_n": 128, "split": 8, "per_stage": true, "stream_k": false}, ...]} ("stages", "outer", "split", "per_stage", "stream_k"
// optional; "stream_k": the tiles walked as one persistent wave, tile-stream-k-products). UserError in one
// line for an unreadable file, bad JSON, or a field of the wrong type or range.
std::vector<TabledShape> readProductShapes(const std::string& path);

struct Program {
  loop::Program loop;                // buffers and kernels' computations
  std::vector<Schedule> schedules;   // one per loop kernel
  Target target = defaultTarget();   // the GPU the schedules are for
  std::vector<TabledShape> productShapes;  // --product-shapes
};
// The entry of p.productShapes for a product of `type` operands shaped as c; nullptr if none.
const TabledShape* tabledShape(const Program& p, DType type, const Contraction& c);

// The program's buffer `name` (made on first use, of `kind` and `dtype`), grown to at least `elements`: the scratch
// buffers kernels of one kind share (they run one after another), such as stream-K's partial tiles and counters.
int programBuffer(Program& p, const std::string& name, loop::Buffer::Kind kind, DType dtype, int64_t elements);

std::string print(const Program& p);
nlohmann::json toJson(const Program& p);
// For `kiln compile --explain-schedule`: each kernel's name, the Torch ops it holds and its schedule on one line
// (describe), which for a shaped matrix product ends with the model's choice, its prediction and the runners-up.
std::string explainSchedules(const Program& p);
// Every schedule fits its kernel and the Target: thread counts, shared memory, vector widths that divide the
// innermost extent and fit 16 bytes, tile shapes the lowering supports, accumulator registers.
void verify(const Program& p);

// Passes
Program lowerFromLoop(const loop::Program& p, const Target& target = defaultTarget());  // tile-lower-from-loop
bool cooperativeReduce(Program& p);             // tile-cooperative-reduce
bool vectorizeAccesses(Program& p);             // tile-vectorize-accesses
bool vectorizeReductions(Program& p);           // tile-vectorize-reductions
bool walkStagesTogether(Program& p);            // tile-walk-stages-together
// tile-vectorize-accesses' rule for one pointwise map without reductions (16-byte vectors, block size, vectors per
// thread); false, m unchanged, where it does not apply. tile-shape-products gives its adding kernels the same.
bool vectorizePointwise(const Target& target, const loop::Program& p, const loop::Kernel& k, PointwiseMap& m);
bool tileLongReductions(Program& p);            // tile-tile-long-reductions
// The tile size is the largest of 64, 32, 16 that still gives a wave of blocks (minTiles; 0: the Target's SMs).
bool tileContractions(Program& p, int64_t minTiles = 0);  // tile-tiled-contractions
bool tensorCoreContractions(Program& p);        // tile-tensor-core-contractions
bool fuseOperandProducers(Program& p);          // tile-fuse-operand-producers
bool deepenKSlices(Program& p);                 // tile-deep-k-slices
bool prefetchSlices(Program& p);                // tile-prefetch-slices
bool pairMmaOperands(Program& p);               // tile-mma-operand-pairs
bool pipelineAsyncCopies(Program& p);           // tile-pipeline-async-copies
bool warpgroupProducts(Program& p);             // tile-warpgroup-products
bool deepenAttentionSteps(Program& p);          // tile-deepen-attention-steps
bool interleaveAttentionRows(Program& p);       // tile-interleave-attention-rows
bool packAttentionPairs(Program& p);            // tile-pack-attention-pairs
bool sumAttentionRowsByMma(Program& p);         // tile-sum-attention-rows-by-mma
bool attentionScoresByWgmma(Program& p);        // tile-attention-scores-by-wgmma
bool attentionValuesByWgmma(Program& p);        // tile-attention-values-by-wgmma
bool attentionScoresAhead(Program& p);         // tile-attention-scores-ahead
bool balanceAttention(Program& p);              // tile-balance-attention
// The Target's SMs when `sms` is 0 (tests pass their own to reach other splits).
bool splitAttentionKeys(Program& p, int64_t sms = 0);  // tile-split-attention-keys
bool shareKvHeads(Program& p);                  // tile-share-kv-heads
bool overlapWgmma(Program& p);                  // tile-overlap-wgmma
// tile-stream-k-products; blocks: the persistent grid (0: a wave of the Target's SMs; tests give fewer).
bool streamKProducts(Program& p, int64_t blocks = 0);
bool tmaCopies(Program& p);                     // tile-tma-copies
bool multicastOperands(Program& p);             // tile-multicast-operands (after tile-specialize-warps)
// tile-specialize-warps; everywhere: on every tma product the ring allows, not only where the GPU measured it faster
// (tests that need a producer warp on small products).
bool specializeWarps(Program& p, bool everywhere = false);
bool deepenRings(Program& p);                   // tile-deepen-rings
bool unrollRings(Program& p);                   // tile-unroll-rings
bool stackOperands(Program& p);                 // tile-stack-operands
// Blocks per thread-block cluster that tile-multicast-operands gives tma products.
constexpr int64_t kMulticastCluster = 2;
// The most slots a cp.async ring has (tile-deepen-rings; the verifier's bound).
constexpr int64_t kMaxRingDepth = 8;
// A product shape (tile-shape-products); given to shapeProducts, it is applied to every eligible product instead of
// the model's choice (tests), a split only where K / split is a multiple of 8 and the product has one stage.
struct ProductShape {
  int64_t tileM = 0, tileN = 0, split = 1;
};
bool shapeProducts(Program& p, const ProductShape* force = nullptr);  // tile-shape-products
// tile-shape-products' model for one product s of shape c (passes/tile/shape_products.cpp says how it predicts and
// chooses): the tile it has now, every candidate tile and split it considers with the predicted µs, the one it chooses
// (before a --product-shapes table), and the prediction for any tile and split.
struct ProductCandidate {
  int64_t tileM = 0, tileN = 0, split = 1;
  double micros = 0;
};
struct ProductPrediction {
  ProductCandidate current, best;
  bool streamK = false;  // best is 128 x 256 by the stream-K rule (passes/tile/shape_products.cpp), not by the prediction
  std::vector<ProductCandidate> considered;
  std::function<double(int64_t tileM, int64_t tileN, int64_t split)> predict;
};
ProductPrediction predictProductShape(const Program& p, const TiledContraction& s, const Contraction& c);
// Kernel i, a product of S stages, becomes S single-stage kernels, stage st's partial products over K / split of its
// reduction per block (at i + st, each with partialSchedule, into an f32 buffer [split][output]; "NAME_split", or
// "NAME_split<st>" for several stages), and a vectorized pointwise map adding each stage's partials in place of its
// accumulator and applying the original epilogue (at i + S). tile-shape-products and tile-stream-ffma-products split
// products this way; split 1 separates a product's stages.
void splitProduct(Program& p, size_t i, int64_t split, TiledContraction partialSchedule);
bool streamFfmaProducts(Program& p);            // tile-stream-ffma-products

// A product left one thread per output with a reduction this long is tiled (16 x 16) even below a wave.
constexpr int64_t kTiledContractionLongReduction = 512;
// Operand values a thread may hold in registers for the next slice (tile-prefetch-slices).
constexpr int64_t kPrefetchRegisters = 64;
// Reductions at least this long get a block per row (see cooperative_reduce.cpp).
constexpr int64_t kCooperativeReduceMinExtent = 64;
// ... and only while there are fewer outputs than this (about 16 resident warps on each of 132 SMs x 8).
constexpr int64_t kCooperativeReduceMaxOutputs = 16384;

}  // namespace kiln::tile
