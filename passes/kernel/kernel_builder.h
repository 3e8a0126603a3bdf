// kernel-lower-from-tile's builder (internal to passes/kernel): turns one Loop-IR kernel and its typed schedule into
// Kernel IR. The common machinery (parameters, float slots, Loop-IR expressions lowered with common
// subexpressions shared, the result's store) is in kernel_builder.cpp; each strategy is carried out in its own
// file: lower_pointwise.cpp, lower_row_reduction.cpp, lower_contraction.cpp. Every number a strategy needs that
// follows from the schedule (threads, grid, slice layouts) comes from tile/layout.h, never recomputed here.
//
// Loop-IR variable v becomes Kernel-IR variable v + kFirstLoopVar; loads become flat row-major indices.
#pragma once
#include <array>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/kernel/lower.h"
#include "kiln/loop/attention.h"
#include "kiln/tile/contraction.h"
#include "kiln/tile/layout.h"

namespace kiln::kernel::detail {

constexpr int kLinearVar = 2;     // the flat output (or reduction) position
constexpr int kFirstLoopVar = 3;  // Loop-IR variables are shifted past the reserved ones

std::string flashGroupSuffix(int64_t rowGroup);  // flash attention's register names: "" for row group 0, "_g1" ...

class KernelBuilder {
 public:
  KernelBuilder(const tile::Program& tp, const loop::Kernel& lk, const tile::Schedule& s) : tp_(tp), lk_(lk), s_(s) {}
  Kernel build();

 private:
  using Cse = std::map<std::string, FE>;

  // Strategies (one file each).
  void pointwise(const tile::PointwiseMap& m);
  void rowReduction(const tile::RowReduction& r);
  void tiledContraction(const tile::TiledContraction& s);
  void flashAttention(const tile::FlashAttention& f);  // lower_attention.cpp
  // What flash attention's phases share: lower_attention.cpp sets it up (sizes, shared slices, the block's
  // coordinates, the thread's registers), lower_attention_loop.cpp copies and walks the key steps, and
  // lower_attention_step.cpp builds a step's parts and the end from it.
  struct Flash {
    // A score or output element of the thread: register, which of its two rows, column (the key within the step, the
    // value column) and, on CUDA cores, the 4-column chunk of v whose existence guards an output (null: always there).
    struct Element {
      int reg, row;
      Idx col, chunk;
      std::string name;
    };
    const tile::FlashAttention* schedule = nullptr;
    const loop::OnlineSoftmax* softmax = nullptr;
    loop::AttentionOperands operands;  // q, k and v as loaded
    tile::FlashSlices slices;
    loop::Axis queryAxis;
    loop::Axis widthAxis;
    loop::Axis depthAxis;
    int64_t depth = 0;        // q's and k's rows (the dot product's extent)
    int64_t width = 0;        // v's rows, the output's
    int64_t queryBlock = 0;   // query rows a block holds (block_q)
    int64_t rowsTaken = 0;    // ... of which it takes along the query axis (tile::flashRowsTaken; the others idle)
    int64_t keyBlock = 0;     // keys a step walks (block_kv)
    int64_t queries = 0;      // the query axis' extent
    int64_t keys = 0;         // the key axis' extent
    int64_t steps = 0;        // key steps of the whole key axis
    int64_t threads = 0;      // of the block
    int64_t queryBlocks = 0;  // per row (tile::flashQueryBlocks)
    int64_t ringDepth = 0;    // the k and v rings' slots (FlashAttention::ring)
    int64_t keySplit = 0;     // warps sharing a row group's keys (FlashAttention::keySplit)
    int64_t keyBlocks = 1;    // blocks sharing a query block's key steps (FlashAttention::keyBlocks)
    int64_t rowGroups = 0;    // warps along the block's rows
    int64_t keysPerWarp = 0;
    int64_t keyTiles = 0;     // tensor cores: 8-key tiles of a warp's keys
    int64_t widthTiles = 0;   // ... 8-column tiles of the output
    int64_t depthSteps = 0;   // ... 16-deep steps of the scores' product
    int64_t keysPerThread = 0;    // CUDA cores: keys tx + 16 c, c < keysPerThread
    int64_t valueChunks = 0;      // ... 4-column chunks of v
    int64_t chunksPerThread = 0;  // ... value chunks tx + 16 n, n < chunksPerThread
    DType operandType = DType::BF16;
    bool onCudaCores = false;  // tile::flashOnCudaCores
    bool wgmmaReads = false;   // shared slices a wgmma reads: fence.proxy.async after copies
    int qSlice = -1;           // shared buffers: q's block, the k and v rings, CUDA cores' probabilities, the key split's
    int kRing = -1;            // hand-over (-1 where absent)
    int vRing = -1;
    int pSlice = -1;
    int combineSlice = -1;
    // The block's coordinates (lower_attention.cpp's flashCoordinates): the packed-pairs item and the items there are,
    // the position in the row's order, the pairing loop's variable; the first query row, the copying thread, the lane.
    Idx packedItem;
    int64_t items = 0;
    Idx item;    // keyBlocks > 1: the block's query block (0 .. items - 1), and which run of its key steps it walks
    Idx keyRun;
    Idx position;
    int halfVar = -1;
    Idx firstQuery;
    Idx copyThread;
    Idx lane;
    Idx rowGroup;   // tensor cores: the warp's row group, its share of every step's keys and the share's first key
    Idx keyShare;
    Idx keyBase;
    Idx quadLane;    // tensor cores: tq = lane mod 4 (columns 2 tq, 2 tq + 1 of every 8-column tile)
    Idx columnLane;  // CUDA cores: tx (keys tx + 16 c, value chunks tx + 16 n)
    Idx firstStep;   // the steps of keys the block's rows may see: [firstStep, endStep)
    Idx endStep;
    // keyBlocks > 1 with a run-time key limit: the live steps the runs share (at least one), null otherwise
    Idx liveSteps;
    std::vector<Idx> rowLocal;  // the thread's rows in the block: 2 per row group (tensor cores), 2 (CUDA cores)
    std::vector<int> runningMax;  // per row of rowLocal: running maximum, sum, the new maximum, the rescale factor
    std::vector<int> runningSum;
    std::vector<int> safeMax;
    std::vector<int> rescale;
    std::vector<Element> scores;
    std::vector<Element> outputs;
    std::vector<std::array<int, 4>> outputTiles;  // tensor cores: row group gr's 8-column tile j at gr * widthTiles + j
    std::vector<std::array<int, 4>> scoreTiles;   // ... its 8-key tile j at gr * keyTiles + j
    int64_t groupsPerWarp = 1;  // the warp's row groups of 16 (FlashAttention::warpRows / 16)
    bool qResident = false;     // q's fragments loaded once (tile::flashQueriesResident) or at every step
    // resident: row group gr's depth step kk at gr * depthSteps + kk; else one per group
    std::vector<std::vector<int>> queryFragments;
    std::vector<std::vector<int>> queryVectors;        // CUDA cores: 16-byte vectors of q, k, p per row (key)
    std::vector<std::vector<int>> keyVectors;
    std::vector<std::vector<int>> probabilityVectors;
    std::vector<int> keyFragments;
    std::vector<int> probabilityPairs;  // 4 per row group
    std::vector<int> valueRegisters;
    int shuffleSlot = -1;  // a shuffled value
    std::vector<int> rowLanes;
    // The score's positive constant factor c (score = c · raw where the mask keeps the key; 1 when the score has none):
    // the score registers hold raw values, maxima are of raw values, and every exponential is 2^((raw - max) · c·log2 e),
    // one multiply-add and one ex2 an element (exp(s - m) would be a subtraction, a multiplication by log2 e and the ex2,
    // besides the scaling of s).
    float scale = 1.f;
    loop::ExprP rawScore;  // the unmasked score over c
    // FlashAttention::rowSumsByMma: row group gr's sum accumulators (the C fragment of an 8-column tile: c0, c1 row g,
    // c2, c3 row g + 8, each the whole row's sum) and the pair register of two bf16/f16 ones; empty and -1 otherwise.
    std::vector<std::array<int, 4>> sumTiles;
    int onesPair = -1;
    float exp2Factor() const;  // c · log2 e
  };
  // Flash attention's phases, in order (lower_attention.cpp): sizes and shared slices; the block's coordinates and the
  // thread's rows; the key steps' bounds; the thread's registers.
  Flash flashSetUp(const tile::FlashAttention& f);
  void flashCoordinates(Flash& x, Block& top, Block& body);
  void flashKeyRange(Flash& x, Block& body);
  std::optional<Idx> flashRuntimeKeyLimit(const Flash& x);
  void flashRegisters(Flash& x, Block& body);
  void flashCudaCoreRegisters(Flash& x, Block& body);  // (flashRegisters' parts on CUDA cores, on tensor cores)
  void flashFragmentRegisters(Flash& x);
  // The copies and the step loop (lower_attention_loop.cpp): cp.async of `rows` rows of an operand into a shared slice,
  // k's and v's rows of a step into a ring slot, the prologue, and the loop over the key steps (scores a step ahead, or
  // the ring's steps).
  void flashCopyRows(const Flash& x, Block& out, int buf, const Idx& at, const loop::Expr& load, int rowVar, int64_t limit,
                     const Idx& rowStart, int64_t rows, int colVar, int64_t cols, int64_t stride, bool swizzled);
  void flashCopyKeys(const Flash& x, Block& out, const Idx& step, const Idx& slot);
  void flashCopyValues(const Flash& x, Block& out, const Idx& step, const Idx& slot);
  void flashPrologue(const Flash& x, Block& body);
  void flashLoadQueries(const Flash& x, Block& out);
  void flashStepsAhead(const Flash& x, const Idx& step, int stepVar, Block& body);
  void flashRingSteps(const Flash& x, const Idx& step, int stepVar, Block& body);
  // One key step's parts, in order, and the end after the loop (lower_attention_step.cpp).
  // S = q · kᵀ of the keys in ring slot `ring` into `tiles` (tensor cores: tiles as Flash::s; CUDA cores: the score
  // elements' registers).
  // By wgmma (scores_by_wgmma) the group is waited for at once unless `wait` is false (the caller waits for it).
  void flashProduct(const Flash& x, const Idx& ring, const std::vector<std::array<int, 4>>& tiles, Block& step, bool wait = true);
  void flashScores(const Flash& x, const Idx& st, Block& step);                  // the score expression on step st's S
  void flashSoftmax(const Flash& x, Block& step);                                // the online softmax per row
  void flashValues(const Flash& x, const Idx& ring, Block& step);                // O += p · v
  void flashFinish(const Flash& x, Block& body);                                 // key-split combine, the output's store
  // flashFinish's parts: the output's store (into `finish`; a barrier before it into `out` when staged), and
  // (lower_attention_merge.cpp) the merge of one partial row into the thread's, the hand-over of key-split warps (into
  // `out`, their merge into `finish`), the partials of blocks sharing a query block's keys (flash-decoding) stored, the
  // ticket taken, and, in the last block, their merge followed by `store`.
  void flashStoreOutput(const Flash& x, Block& out, Block& finish);
  void flashMergeRow(const Flash& x, int r, const std::function<FE(int64_t)>& theirs, Block& out);
  void flashCombineWarps(const Flash& x, Block& out, Block& finish);
  void flashCombineBlocks(const Flash& x, Block& out, Block merged, Block store);
  // Whether the output rows go through the v ring to 16-byte stores (tensor cores, no key split, the output in the
  // operand type, rows of a multiple of 8 elements, the ring at least block_q rows deep).
  bool flashStagesOutput(const Flash& x) const;
  Idx flashQueryFragment(const Flash& x, int64_t gr, int64_t kk);  // q's ldmatrix.x4 address: row group gr, depths 16 kk..
  // Row reductions: each stage's accumulator combined over the threads of the row (lower_row_reduction.cpp).
  void combineAcrossRow(const tile::RowReduction& r, size_t stage, const Idx& rowInBlock, Block& out);
  // The one reduction axis of `stages` (of one extent, none reading another's total) as vectors of r.reductionVector
  // elements, vector c = t, t + T, ... (T threads per row), walked once for all of them.
  void reduceByVectors(const tile::RowReduction& r, const std::vector<size_t>& stages, const Idx& t);
  // `count` vectors of `stages` at first, first + stride, ... (kernel-level index of the vector), accumulated; their
  // loads issued before any is used, the last guarded by < vectors where guardLast. Names the positions name0, name1, ...
  void takeVectors(const std::vector<size_t>& stages, const Idx& first, int64_t stride, int64_t count, bool guardLast,
                   const std::string& name, Block& out);

  // Common machinery (kernel_builder.cpp).
  int param(int buffer, bool written);
  int slot(const std::string& name);
  Idx var(const loop::Axis& a) { return idxVar(a.var + kFirstLoopVar, a.name); }
  Idx shifted(const Idx& e);  // a Loop-IR index in Kernel-IR terms
  void unflatten(const std::vector<loop::Axis>& axes, const Idx& flat, int64_t flatExtent, Block& out);
  FE lower(const loop::ExprP& e, Block& out, Cse& cse);
  Idx flatIndex(const loop::Expr& load);  // a Load's flat element index in Kernel-IR terms
  Idx outputIndex();
  // The output's flat index with Loop-IR variable `var` (a parallel axis) at `value` (a Loop-IR index).
  Idx outputIndexAt(int var, const Idx& value);
  // e with Loop-IR variable `var` replaced by `value` in every index.
  static loop::ExprP atAxis(const loop::ExprP& e, int var, const Idx& value);
  // acc = acc + x * y on float slots (what nvcc contracts into one FFMA): CUDA-core products and attention.
  static Stmt multiplyAdd(int acc, int x, int y) {
    return assign(acc, fapply(Fn::Add, {fvar(acc), fapply(Fn::Mul, {fvar(x), fvar(y)})}));
  }
  void storeResult(Block& out, Cse cse = {});
  loop::ExprP storedResult() const;  // lk_.result without a final cast to the output's type (the store rounds alike)
  void hoistRowInvariants(const loop::ExprP& e, Block& out, Cse& cse);
  void accumulate(size_t stage, Block& body);
  void makeAccumulators();
  // A fresh Kernel-IR index variable defined as `value` in `out`, ranging over [0, extent).
  Idx defVar(Block& out, const std::string& name, Idx value, int64_t extent);
  int freshLoopVar();    // a Loop-IR variable id no axis of the kernel uses
  int freshKernelVar();  // a Kernel-IR index variable id nothing else uses (freshLoopVar, shifted)

  // Vector accesses (kernel_builder.cpp). `copies[v]` is an expression evaluated for V consecutive points of one
  // axis (copy v at offset v). Every load that reads V consecutive, aligned elements across the copies is read
  // once with vector loads, its copies entered in `cse` under their own keys, so lowering the copies reuses them.
  void vectorLoads(const std::vector<loop::ExprP>& copies, Block& out, Cse& cse);
  // The V copies' values stored with vector stores at the output's flat index of copy 0 (of buffer `buffer`: -1, the
  // kernel's output).
  void storeVector(const std::vector<FE>& values, const Idx& index, Block& out, int buffer = -1);

  // Tiled contractions (lower_contraction.cpp).
  struct Owned {  // one output a thread holds: its row and column in the matrix, its accumulator per stage
    Idx row, col;
    std::vector<int> acc;
  };
  struct Tiling {
    tile::Contraction c;
    tile::TiledContraction s;
    loop::Axis mAxis, nAxis;
    Idx tileM, tileN, k0;
    std::vector<int> sharedA, sharedB;
    std::vector<Owned> owned;
    Idx ring;  // pipelined (cp_async) products: the ring slot the multiplication reads; null otherwise
    Idx copier;  // pipelined products: threadIdx as a signed index variable (the copies' indices have negative terms)
    // Products with a producer warp: the thread's warpgroup, warp-uniform (defWarpUniform); the producer warp's is the
    // number of consumer warpgroups. Branches on it keep each warpgroup's wgmmas on a path ptxas knows is uniform.
    Idx role;
    Block epilogue;  // stream-K products: the epilogue, built before the k loop that runs it (contractionEpilogue)
    // Wgmma products: null, or where a slice's first wgmma starts its accumulators afresh (zero: scale-d 0, D = A·B) rather
    // than adding to them (stream-K, at each tile's first slice: no accumulator is written outside the wgmmas in the loop).
    Idx accumulate;
  };
  // A stream-K product's walk (TiledContraction::streamBlocks, lower_contraction_stream_k.cpp): the block's cluster's
  // place r in the order of walks (G - 1 - its cluster), its first step and its number of steps.
  struct StreamWalk {
    tile::StreamK w;
    Idx order, first, length;
  };
  struct OperandSlice {  // one operand of a stage, staged slice by slice into shared buffer `buf`
    loop::ExprP value;
    loop::Axis rowAxis, kAxis;
    int64_t rowExtent = 0, rows = 0;
    Idx tileIdx;
    int buf = 0;
    const tile::TiledContraction::Operand* staging = nullptr;
    // cp_async rings: elements from one ring slot to the next (0: the slice's own size), and where in its slot the
    // slice starts (stacked B slices: stage st at st times the slice's size)
    int64_t slotStride = 0, slotOffset = 0;
  };
  struct Prefetched {  // a slice staged through registers
    OperandSlice operand;
    struct Element {
      Idx kk, rr;
      int reg = 0;
    };
    std::vector<Element> elements;
    bool partial = false;  // the last elements of some threads lie past the slice (guarded by rr < rows)
  };
  Idx sliceSlot(const Tiling& t, const OperandSlice& o, const Idx& kk, const Idx& rr);
  Stmt guardedOperandLoad(const Tiling& t, const OperandSlice& o, const Idx& rr, const Idx& kk, const Idx& kStart,
                          const std::function<Stmt(FE)>& sink);
  void stageOperand(const Tiling& t, const OperandSlice& o, Block& out);
  Prefetched prefetched(const Tiling& t, const OperandSlice& operand);
  Stmt insideSlice(const Prefetched& o, const Prefetched::Element& el, Stmt s);
  void loadSlice(const Tiling& t, const Prefetched& o, const Idx& kStart, Block& out);
  void storeSlice(const Tiling& t, const Prefetched& o, Block& out);
  std::vector<std::vector<int>> cudaCoreAccumulators(Tiling& t, const Idx& tx, const Idx& ty);
  std::function<void(Block&)> multiplyOnCudaCores(Tiling& t);
  std::function<void(Block&)> multiplyOnTensorCores(Tiling& t);
  std::function<void(Block&)> multiplyOnWarpgroups(Tiling& t);  // lower_contraction_wgmma.cpp
  std::function<void(Block&)> multiplyOnCudaCoresStreamed(Tiling& t);  // rows_f32 rings, lower_contraction_ffma.cpp
  // Pipelined products (lower_contraction_async.cpp).
  void copySliceAsync(const Tiling& t, const OperandSlice& o, const Idx& kStart, const Idx& ringSlot, Block& out);
  std::function<Idx(const Idx&)> rotatedSlices(const Tiling& t);  // slice i's first k, rotated per tile column
  void pipelinedSteps(Tiling& t, const std::vector<OperandSlice>& operands, const std::function<void(Block&)>& multiply);
  // The same ring filled by TMA copies completing on mbarriers (lower_contraction_tma.cpp).
  void tmaSteps(Tiling& t, const std::vector<OperandSlice>& operands, const std::function<void(Block&)>& multiply);
  // A reduction split in the kernel: the block's partial tile handed over, and the tile's last block adding them all
  // before `epilogue` (lower_contraction_tma.cpp).
  // A partial tile handed over by another block (vector v of 4 at at(v), in the order of accs) added to the thread's
  // accumulators accs (the split and stream-K hand-overs).
  void addHandedTile(int partials, const std::function<Idx(int64_t)>& at, const std::vector<int>& accs, Block& out);
  // A tma ring: its mbarrier buffers (full, and empty or -1), each operand's tensor map and where its k starts in the map
  // (a split's part), the bytes that complete a slot's phase, and slice i's first k (rotatedSlices).
  struct TmaRing {
    int full = -1, empty = -1;
    std::vector<int> maps;
    std::vector<Idx> shifts;     // per operand: k's shift (a split's part), in the kernel's variables
    std::vector<Idx> rowShifts;  // per operand: the rows' shift (an expert product's matrix), in the kernel's variables
    int64_t sliceBytes = 0;
    std::function<Idx(const Idx&)> sliceStart;
  };
  TmaRing tmaRing(const Tiling& t, const std::vector<OperandSlice>& operands, bool empty);
  static bool multicastPart(const Tiling& t, const OperandSlice& o);  // o's slices are copied in parts, one per block of the cluster
  // The arrive.expect_tx on full[slot] and the copies of slice i into ring slot `slot`.
  void tmaIssue(const Tiling& t, const std::vector<OperandSlice>& operands, const TmaRing& r, const Idx& i, const Idx& slot,
                Block& out);
  // With a producer warp, in clusters or not (lower_contraction_specialized.cpp).
  void specializedTmaSteps(Tiling& t, const std::vector<OperandSlice>& operands, const std::function<void(Block&)>& multiply);
  // Stream-K products (lower_contraction_stream_k.cpp): the walk's variables (defined at the kernel's start); the unit of
  // the walk's step i and that unit's tile (tm, tn), defined in `out`; the loops over the walk's units and each one's
  // slices, `step` building the ring step of walk step i; what the consumers do where a unit's slices [from, to) end
  // (partial tile and release, or wait, partials added and the epilogue).
  StreamWalk streamWalk(const Tiling& t);
  Idx streamUnit(const StreamWalk& walk, const Idx& i, Block& out);
  void defineStreamTile(const Tiling& t, const Idx& unit, Block& out);
  void streamLoops(Tiling& t, const StreamWalk& walk, const std::function<void(const Idx&, Block&)>& step);
  void streamTileEnd(const Tiling& t, const StreamWalk& walk, const Idx& unit, const Idx& from, const Idx& to, Block& out);
  // The epilogue's statements for every owned output (lower_contraction.cpp), the producer warp's guard left to the caller.
  Block contractionEpilogue(Tiling& t);
  // loop::ReadOnlyAt products: the statements of k_.body from `from` on run only in blocks whose tile's rows hold rows
  // of the block's matrix.
  void skipTilesOfOtherGroups(const Tiling& t, size_t from);
  // The epilogue's paired vector stores (lower_contraction.cpp).
  bool pairedStores(const Tiling& t);
  // `lhs < bound ? body`, or body in a scope of its own where every value lhs takes over the extents is below bound.
  Stmt guardBelow(const Idx& lhs, int64_t bound, Block body);
  bool below(const Idx& lhs, int64_t bound);
  void storePair(const Tiling& t, const Owned& a, const Owned& b, Block& store);
  // The multiplication of one staged slice (at ring slot t.ring) with fragments in pair registers loaded by
  // ldmatrix.x4; acc[stage] as multiplyOnTensorCores lays it out.
  void ldmatrixSteps(const Tiling& t, int64_t mi, int64_t ni, const Idx& lane, const Idx& warpRow, const Idx& warpCol,
                     const std::vector<std::vector<int>>& acc, Block& out);
  int pairReg(const std::string& name);

  const tile::Program& tp_;
  std::array<int, 2> pairSlots_{-1, -1};  // storePair's two float slots, made once per kernel
  const loop::Kernel& lk_;
  const tile::Schedule& s_;
  Kernel k_;
  std::vector<int> accs_;
  VarExtents extents_;
  int nextLoopVar_ = -1;
  std::vector<int> cVars_;  // row reductions with the row in registers: the Loop-IR variable of each vector a thread holds
};

// An attention score's positive constant factor and what it multiplies, where the unmasked score is such a product
// (c · raw, e.g. q · kᵀ times 1/sqrt(d)); {1, unmasked} otherwise (lower_attention_step.cpp).
std::pair<float, loop::ExprP> flashScoreScale(const loop::ExprP& unmasked);
// 2^(d · factor): the exponential of a difference of raw scores (Flash::scale, Flash::exp2Factor).
FE exp2Of(FE d, float factor);

}  // namespace kiln::kernel::detail
