// kernel-lower-from-tile for FlashAttention schedules (tile/ir.h): one block per 16 to 128 query rows (block_q) of one
// (batch, head) point, a warp per 16 rows (or 32, warp_rows: two row groups, each step below done for both, every k and v
// fragment loaded once for the two; q's fragments loaded at every step where both groups' would not fit at once), the keys
// walked in steps of block_kv (64, or 128 on tensor cores), the grid's blocks in tile::FlashAttention's order (rows_inner).
//
//   prologue: cp.async q's block_q rows and step s_begin's k and v rows into ring slot 0, then steps s_begin + 1 ..
//     s_begin + ring - 2 into the next slots; a commit group each
//   for st in [s_begin, s_end):                       (the steps some row of the block may see: tile::FlashAttention)
//     cp.async step st + ring - 1 (if any) into its slot; commit; wait for all but the ring - 1 newest groups; barrier
//     first step only: q's fragments by ldmatrix.x4 into pair registers (kept for every step)
//     S = q · kᵀ: per 16 of depth, k's fragments by ldmatrix.x4 and block_kv / 8 mma.sync into block_kv / 2 score
//       accumulators per thread; with scores_by_wgmma (one warpgroup, q and k slices in rows of 64 depths under the
//       128-byte swizzle, made visible to the async proxy by fence.proxy.async before the barrier) one wgmma
//       m64n{block_kv}k16 per 16 of depth into the same accumulators, waited for at once (or, a step ahead, after P·V)
//     s = score(S) / c per element (c: the score's positive constant factor, 1 if none; masks; keys past the end are
//       -inf; steps inside every row's mask bounds skip the mask terms), the online softmax per row, in base 2 (F = c log2 e):
//       m' = max(m, rowmax s) over the quad's 4 lanes (shuffles); alpha = 2^((m - m') F); l *= alpha; O *= alpha;
//       p = 2^(s F - m' F); l += p         (m' = -inf, a row that has seen no key yet, counts as 0)
//     O += p · v: p's accumulators are the A fragments of the next mma as they stand (the C layout of two 8-column tiles
//       is the A layout of one 16-deep step), packed to bf16 pairs once; v's fragments by ldmatrix.x4.trans; with
//       row_sums_by_mma, l += p is one more mma of those A fragments with a B fragment of ones (the whole row's sum);
//       with values_by_wgmma (one warpgroup) one wgmma m64n{width}k16 per 16 keys from those pairs (register A) and v
//       in swizzled rows of 64 columns (transposed B), issued and waited for at the step's end
//     barrier (the slot is overwritten next step)
//   With scores_ahead (tile-attention-scores-ahead): the prologue multiplies the first step's S into a second set of
//     accumulators; step st takes them, applies the score expression, multiplies step st + 1's S into that set spread
//     through its softmax (`interleaved`), runs P·V, and copies v of st + 2 and k of st + 3 (k two steps ahead, v one, in
//     two slots each); the last step, with nothing to multiply ahead, follows the loop.
//   l summed over the quad (unless summed by mma); out = result(O / l) for the rows inside the query axis: stored per
//   element, or (KernelBuilder::flashStagesOutput) written as bf16 rows into the v ring, then moved by 16-byte shared
//   loads and 16-byte global stores, whole sectors.
// Thread layout (kernel::mma): warp w works on row group rg = w mod (block_q / 16) and, with a key split, on share
// kh = w div (block_q / 16) of every step's keys; its lane l holds rows 16 rg + g and 16 rg + g + 8 (g = l / 4) at columns
// 2t, 2t + 1 (t = l % 4) of every 8-column tile. Pairing (pair_blocks) runs all of the above once per query block of the
// pair, with a barrier between. Packed pairs (packed_pairs) run it as one of two groups of a thread block (Kernel IR
// groups: the body above, unchanged, with its own shared memory and barrier), guarded where the group has no query block.
//
// f32 (CUDA cores, tile::flashOnCudaCores): 8 x block_q threads; 16 lanes tx of a warp (lane bits 0, 2, 3, 4) hold rows
// ty and ty + block_q / 2 (ty = 2 warp + lane bit 1) and keys tx + 16 c of every step: S by ffma from 16-byte vectors of 4
// depths of q and k (two rows, block_kv / 16 keys: 6 shared loads per 32 multiply-adds at 64 keys), the row maxima and
// sums over the 16 lanes by shuffles; the probabilities go through a shared [block_q][block_kv + 4] slice (a barrier),
// read back 4 keys at a time, each multiplied with the 16-byte vectors of v's columns 4 (tx + 16 n) .. + 3.
//
// This file sets the kernel up (sizes, buffers, coordinates, registers) and runs the phases in order; the copies and the
// step loop are in lower_attention_loop.cpp, the step's parts (S, the scores, the online softmax, P·V) and the end
// (key-split combine, the output) in lower_attention_step.cpp.
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <limits>

#include "kernel_builder.h"
#include "kiln/loop/attention.h"
#include "kiln/support/error.h"

namespace kiln::kernel::detail {

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();

// FlashAttention::packedPairs: the item (index into the query blocks listed heaviest first) of the kernel's block v,
// group g = v mod 2 of thread block b = v div 2, for S thread blocks and N items (S < N <= 2 S, M = N - S): group 0 of
// b < M takes S - M + b and group 1 N - 1 - b; group 0 of b >= M takes b - M and group 1 none (N).
Idx packedItem(const Idx& v, int64_t S, int64_t N) {
  const int64_t M = N - S;
  const Idx b = floorDiv(v, 2), g = mod(v, 2);
  const Idx alone = idxMin(idxMax(idxAdd(b, 1 - M), idxConst(0)), idxConst(1));  // b >= M
  const Idx first = idxAdd(b, S - M) + idxMul(alone, -S);                     // S - M + b, or b - M
  const Idx second = idxAdd(idxMul(b, -1), N - 1) + alone * idxAdd(b, 1);    // N - 1 - b, or N
  return first + g * (second + idxMul(first, -1));
}

}  // namespace

// Register names: row group 0's as with one group; the second's end in _g1.
std::string flashGroupSuffix(int64_t gr) { return gr == 0 ? std::string() : fmt::format("_g{}", gr); }

KernelBuilder::Flash KernelBuilder::flashSetUp(const tile::FlashAttention& f) {
  Flash x;
  x.schedule = &f;
  x.softmax = &*lk_.attention;
  const auto ops = loop::flashAttentionOperands(tp_.loop, lk_);
  KILN_ASSERT(ops, "kernel {}: flash_attention on operands it cannot copy", lk_.name);
  x.operands = *ops;
  x.slices = tile::flashSlices(f, lk_);
  x.queryAxis = lk_.parallel[static_cast<size_t>(f.queryAxis)];
  x.widthAxis = lk_.parallel[static_cast<size_t>(lk_.rowAxes)];
  x.depthAxis = x.softmax->dot.axes[0];
  x.depth = ops->depth;
  x.width = ops->width;
  x.queryBlock = f.blockQ;
  x.rowsTaken = tile::flashRowsTaken(f);
  x.keyBlock = f.blockKV;
  x.queries = x.queryAxis.extent;
  x.keys = x.softmax->key.extent;
  x.threads = tile::threadsPerBlock(f);
  x.queryBlocks = tile::flashQueryBlocks(f, lk_);
  x.steps = (x.keys + x.keyBlock - 1) / x.keyBlock;
  x.operandType = f.mmaType;
  x.onCudaCores = tile::flashOnCudaCores(f);
  k_.block = {x.threads, 1, 1};
  k_.grid = {tile::gridBlocks(f, lk_), 1, 1};
  extents_[kThreadIdx] = x.threads;
  extents_[kBlockIdx] = k_.grid[0];
  auto sharedBuf = [&](const char* name, int64_t elements, DType type) {
    k_.shared.push_back(SharedBuffer{name, elements, type, true});
    return static_cast<int>(k_.shared.size()) - 1;
  };
  x.ringDepth = f.ring;
  x.wgmmaReads = f.scoresByWgmma || f.valuesByWgmma;
  x.qSlice = sharedBuf("qs", x.slices.q, x.operandType);
  x.kRing = sharedBuf("ks", x.ringDepth * x.slices.k, x.operandType);
  x.vRing = sharedBuf("vs", x.ringDepth * x.slices.v, x.operandType);
  // groupsPerWarp row groups of 16 per warp; rowGroups warps along the block's rows (each with keySplit warps sharing
  // its rows).
  x.groupsPerWarp = x.onCudaCores ? 1 : f.warpRows / 16;
  x.keySplit = f.keySplit;
  x.keyBlocks = f.keyBlocks;
  x.rowGroups = x.queryBlock / (16 * x.groupsPerWarp);
  x.keysPerWarp = x.keyBlock / x.keySplit;
  x.qResident = x.onCudaCores || tile::flashQueriesResident(f, x.depth);
  if (x.onCudaCores) x.pSlice = sharedBuf("ps", x.slices.p, DType::F32);  // a step's probabilities
  if (x.keySplit > 1) x.combineSlice = sharedBuf("comb", x.slices.combine, DType::F32);
  k_.dynamicSharedBytes = k_.dynamicBuffersBytes();
  x.keyTiles = x.keysPerWarp / kMmaN;
  x.widthTiles = x.width / kMmaN;
  x.depthSteps = x.depth / kMmaK;
  x.keysPerThread = x.keyBlock / 16;
  x.valueChunks = x.width / 4;
  x.chunksPerThread = (x.valueChunks + 15) / 16;
  return x;
}

// Block coordinates: the query block, last blocks first (under a causal mask they see the most keys), then the other
// row axes. Paired (pairBlocks): block b of a row's P = ceil(QB / 2) takes query block QB - 1 - b, then b (the middle
// one once when QB is odd), in a loop whose body is everything below. Then the thread's coordinates and rows.
void KernelBuilder::flashCoordinates(Flash& x, Block& top, Block& body) {
  const tile::FlashAttention& f = *x.schedule;
  const int64_t queryBlocks = x.queryBlocks, queryBlock = x.queryBlock;
  // signed: the expressions below subtract (a grid of one block names no block: nvcc refuses unused variables)
  Idx bid = k_.grid[0] > 1 && x.keyBlocks == 1 ? defVar(top, "bid", blockIdx(), k_.grid[0]) : idxConst(0);
  if (x.keyBlocks > 1) {  // block run x items + item walks run `run` of query block `item`'s steps
    const int64_t items = k_.grid[0] / x.keyBlocks;
    x.keyRun = defVar(top, "run", floorDiv(blockIdx(), items), x.keyBlocks);
    if (items > 1) bid = defVar(top, "bid", mod(blockIdx(), items), items);
    x.item = bid;
  }
  const int64_t perRow = f.pairBlocks ? (queryBlocks + 1) / 2 : queryBlocks;
  std::vector<loop::Axis> outer;
  for (int d = 0; d < lk_.rowAxes; ++d)
    if (d != f.queryAxis) outer.push_back(lk_.parallel[static_cast<size_t>(d)]);
  const int64_t rowCount = lk_.rowPoints() / x.queries;
  // packedPairs: the kernel's block b is group b mod 2 of thread block b div 2 and takes item `item` of the query blocks
  // listed heaviest first (row item mod R, position item div R of QB - 1, .., 0), none where item is N (see
  // FlashAttention::packedPairs and packedItem).
  x.items = rowCount * queryBlocks;
  if (f.packedPairs > 0) {
    k_.groups = 2;
    x.packedItem = defVar(top, "item", packedItem(bid, f.packedPairs, x.items), x.items + 1);
    bid = defVar(top, "it", idxMin(x.packedItem, idxConst(x.items - 1)), x.items);  // in range where `item` names none (guarded below)
  }
  // rowsInner: block b takes row b mod R and position pb = b div R of the order QB - 1, .., QB - H, 0, .., QB - H - 1
  // (FlashAttention::rowsInner); otherwise row b div QB, position b mod QB of QB - 1, .., 0.
  const bool inner = f.rowsInner || f.packedPairs > 0;
  unflatten(outer, inner ? mod(bid, rowCount) : floorDiv(bid, perRow), rowCount, top);
  const Idx pb = x.position = defVar(top, "pb", inner ? floorDiv(bid, rowCount) : mod(bid, perRow), perRow);
  for (size_t d = static_cast<size_t>(lk_.rowAxes) + 1; d < lk_.parallel.size(); ++d) {  // extent-1 axes after the width
    top.push_back(defIdx(lk_.parallel[d].var + kFirstLoopVar, lk_.parallel[d].name, idxConst(0)));
    extents_[lk_.parallel[d].var + kFirstLoopVar] = 1;
  }
  x.halfVar = freshKernelVar();
  extents_[x.halfVar] = 2;
  const Idx half = idxVar(x.halfVar, "half");
  const int64_t heavy = (queryBlocks + 1) / 2;  // rowsInner: positions pb >= heavy (light = 1) take query block pb - heavy
  Idx qb = f.pairBlocks ? defVar(body, "qb", idxAdd(idxMul(pb, -1), queryBlocks - 1) + half * idxAdd(idxMul(pb, 2), 1 - queryBlocks), queryBlocks)
           : f.rowsInner ? defVar(body, "qb", idxAdd(idxMul(pb, -1), queryBlocks - 1) +
                                                  floorDiv(pb, heavy) * idxAdd(idxMul(pb, 2), 1 - heavy - queryBlocks), queryBlocks)
                         : defVar(body, "qb", idxAdd(idxMul(pb, -1), queryBlocks - 1), queryBlocks);
  x.firstQuery = simplify(qb * idxConst(x.rowsTaken), extents_);
  // Rows sharing k and v (FlashAttention::blockRows): k's and v's rows are those of the block's first query row.
  const int queryVar = x.queryAxis.var;
  if (f.blockRows > 0 && (loop::usesVar(*x.operands.k, queryVar) || loop::usesVar(*x.operands.v, queryVar))) {
    body.push_back(defIdx(queryVar + kFirstLoopVar, x.queryAxis.name, x.firstQuery));
    extents_[queryVar + kFirstLoopVar] = x.queries;
  }
  x.copyThread = defVar(top, "ct", threadIdx(), x.threads);
  Idx warp = defVar(top, "warp", floorDiv(threadIdx(), Target::kWarpSize), x.threads / Target::kWarpSize);
  x.lane = defVar(top, "lane", mod(threadIdx(), Target::kWarpSize), Target::kWarpSize);
  // The thread's rows in the block: mma 16 (G rg + gr) + g (+ 8) for its row groups gr; CUDA cores ty (+ block_q / 2).
  if (x.onCudaCores) {
    // Lane bits 0, 2, 3, 4 make tx, bit 1 ty: lanes l and l ^ 1 read the same q (and p) row, l and l ^ 2 the same k row
    // and v columns, so each 16-byte shared load returns in two passes rather than four (lower_contraction_ffma.cpp).
    x.columnLane = defVar(top, "tx", mod(x.lane, 2) + floorDiv(x.lane, 4) * idxConst(2), 16);
    Idx ty = defVar(top, "ty", warp * idxConst(2) + mod(floorDiv(x.lane, 2), 2), queryBlock / 2);
    x.rowLocal = {ty, simplify(idxAdd(ty, queryBlock / 2), extents_)};
    return;
  }
  Idx g = defVar(top, "g", floorDiv(x.lane, 4), 8);
  x.quadLane = defVar(top, "tq", mod(x.lane, 4), 4);
  // Warp w holds rows 16 G (w mod rowGroups) .. + 16 G - 1 of the block and keys kh * keysPerWarp .. of every step.
  x.rowGroup = defVar(top, "rg", mod(warp, x.rowGroups), x.rowGroups);
  x.keyShare = defVar(top, "kh", floorDiv(warp, x.rowGroups), x.keySplit);
  x.keyBase = simplify(x.keyShare * idxConst(x.keysPerWarp), extents_);
  for (int64_t gr = 0; gr < x.groupsPerWarp; ++gr) {
    const Idx base = simplify(x.rowGroup * idxConst(16 * x.groupsPerWarp) + idxConst(16 * gr), extents_);
    x.rowLocal.push_back(simplify(base + g, extents_));
    x.rowLocal.push_back(simplify(base + g + idxConst(8), extents_));
  }
}

// The steps of keys the block's rows may see.
void KernelBuilder::flashKeyRange(Flash& x, Block& body) {
  const tile::FlashAttention& f = *x.schedule;
  Idx first = idxConst(0), end = idxConst(x.steps);
  if (f.keyFrom) first = floorDiv(idxMax(idxConst(0), idxAdd(x.firstQuery, *f.keyFrom)), x.keyBlock);
  if (f.keyTo) {
    Idx lastRow = idxMin(idxAdd(x.firstQuery, x.rowsTaken - 1), idxConst(x.queries - 1));
    end = floorDiv(idxAdd(idxMin(idxConst(x.keys), idxAdd(lastRow, *f.keyTo)), x.keyBlock - 1), x.keyBlock);
  }
  const std::optional<Idx> most = flashRuntimeKeyLimit(x);
  if (most) {
    // keys read at run time (a decoder step's positions): the steps before the block's largest limit, at least one
    const Idx before = floorDiv(idxAdd(*most, x.keyBlock - 1), x.keyBlock);
    end = idxMax(idxAdd(first, 1), idxMin(end, before));
  }
  if (x.keyBlocks > 1) {  // run r of R: steps [from + floor(r n / R), from + floor((r + 1) n / R)) of the n from `from`
    const Idx from = defVar(body, "s_from", first, x.steps + 1);
    const Idx count = defVar(body, "s_count", end + idxMul(from, -1), x.steps + 1);
    if (most) x.liveSteps = count;
    first = from + floorDiv(x.keyRun * count, x.keyBlocks);
    end = from + floorDiv(idxAdd(x.keyRun, 1) * count, x.keyBlocks);
  }
  x.firstStep = defVar(body, "s_begin", first, x.steps + 1);
  x.endStep = defVar(body, "s_end", end, x.steps + 1);
}

// The largest run-time key limit (loop::runtimeKeyLimit) among the block's query rows, in Kernel-IR terms: the maximum
// over rows q0 .. q0 + block_q - 1 (clamped into the query axis), when there are at most kRuntimeLimitRows distinct rows
// (a decode step's one, a short chunk's few); nullopt otherwise, and the block walks every step its compile-time bounds
// allow (the mask in the score still hides the keys past each row's limit).
std::optional<Idx> KernelBuilder::flashRuntimeKeyLimit(const Flash& x) {
  constexpr int64_t kRuntimeLimitRows = 8;
  const std::optional<Idx> limit = loop::runtimeKeyLimit(lk_);
  const int64_t rows = std::min(x.rowsTaken, x.queries);
  if (!limit || rows > kRuntimeLimitRows) return std::nullopt;
  const Idx atRows = shifted(*limit);
  const int queryVar = x.queryAxis.var + kFirstLoopVar;
  std::optional<Idx> most;
  for (int64_t r = 0; r < rows; ++r) {
    const Idx row = idxMin(idxAdd(x.firstQuery, r), idxConst(x.queries - 1));
    const Idx at = simplify(substitute(atRows, [&](int v, const std::string&) { return v == queryVar ? row : nullptr; }), extents_);
    most = most ? idxMax(*most, at) : at;
  }
  return most;
}

// Per-thread state: running maximum and sum of its rows, output accumulators, score accumulators, q fragments.
void KernelBuilder::flashRegisters(Flash& x, Block& body) {
  const tile::FlashAttention& f = *x.schedule;
  const int64_t groups = x.groupsPerWarp, keyTiles = x.keyTiles, widthTiles = x.widthTiles, depthSteps = x.depthSteps;
  const int rows = static_cast<int>(x.rowLocal.size());
  for (int r = 0; r < rows; ++r) {
    x.runningMax.push_back(slot(fmt::format("m{}", r)));
    x.runningSum.push_back(slot(fmt::format("l{}", r)));
    x.safeMax.push_back(slot(fmt::format("ms{}", r)));
    x.rescale.push_back(slot(fmt::format("alpha{}", r)));
    body.push_back(assign(x.runningMax[r], fconst(-kInf)));
    if (!f.rowSumsByMma) body.push_back(assign(x.runningSum[r], fconst(0.f)));  // (by mma: l is the ls accumulators' at the end)
  }
  x.outputTiles.resize(static_cast<size_t>(groups * widthTiles));
  x.scoreTiles.resize(static_cast<size_t>(groups * keyTiles));
  x.queryFragments.resize(static_cast<size_t>(x.qResident ? groups * depthSteps : groups));
  if (x.onCudaCores) {
    flashCudaCoreRegisters(x, body);
  } else {
    for (int64_t gr = 0; gr < groups; ++gr)
      for (int64_t j = 0; j < widthTiles; ++j)
        for (int c = 0; c < 4; ++c) {
          auto& reg = x.outputTiles[static_cast<size_t>(gr * widthTiles + j)][c];
          reg = slot(fmt::format("o{}_{}{}", j, c, flashGroupSuffix(gr)));
          body.push_back(assign(reg, fconst(0.f)));
          x.outputs.push_back({reg, static_cast<int>(2 * gr) + c / 2,
                               simplify(idxConst(j * kMmaN + c % 2) + x.quadLane * idxConst(2), extents_), nullptr,
                               fmt::format("eo{}_{}{}", j, c, flashGroupSuffix(gr))});
        }
    for (int64_t gr = 0; gr < groups; ++gr)
      for (int64_t j = 0; j < keyTiles; ++j)
        for (int c = 0; c < 4; ++c) {
          auto& reg = x.scoreTiles[static_cast<size_t>(gr * keyTiles + j)][c];
          reg = slot(fmt::format("s{}_{}{}", j, c, flashGroupSuffix(gr)));
          x.scores.push_back({reg, static_cast<int>(2 * gr) + c / 2, x.keyBase + idxConst(j * kMmaN + c % 2) + x.quadLane * idxConst(2),
                              nullptr, fmt::format("kj{}_{}{}", j, c, flashGroupSuffix(gr))});
        }
    flashFragmentRegisters(x);
  }
  // Row sums by mma (FlashAttention::rowSumsByMma): per row group an accumulator tile, and a pair of ones.
  if (f.rowSumsByMma) {
    for (int64_t gr = 0; gr < groups; ++gr) {
      x.sumTiles.emplace_back();
      for (int c = 0; c < 4; ++c) {
        x.sumTiles.back()[c] = slot(fmt::format("ls{}{}", c, flashGroupSuffix(gr)));
        body.push_back(assign(x.sumTiles.back()[c], fconst(0.f)));
      }
    }
    const int one = slot("one");
    body.push_back(assign(one, fconst(1.f)));
    x.onesPair = pairReg("rones");
    body.push_back(packPair(x.operandType, x.onesPair, one, one));
  }
  x.shuffleSlot = slot("sh");
  x.rowLanes = x.onCudaCores ? std::vector<int>{1, 4, 8, 16} : std::vector<int>{1, 2};  // lanes sharing a row
  // The score's constant factor, taken out of the scores into the exponentials (Flash::scale). Without key bounds (no
  // mask keyBounds recognises, or one that leaves some row no key) every step takes the whole score, masks included.
  const auto scale = flashScoreScale(f.keyFrom || f.keyTo ? loop::unmaskedScore(lk_, f.queryAxis) : x.softmax->score);
  x.scale = scale.first;
  x.rawScore = scale.second;
}

// CUDA cores: keys tx + 16 c (c < keysPerThread) and value chunks tx + 16 n (n < chunksPerThread, 4 columns each) per
// row; 16-byte vectors of q, k, p and v.
void KernelBuilder::flashCudaCoreRegisters(Flash& x, Block& body) {
  const Idx& tx = x.columnLane;
  for (int r = 0; r < 2; ++r)
    for (int64_t n = 0; n < x.chunksPerThread; ++n) {
      Idx chunk = simplify(idxAdd(tx, 16 * n), extents_);
      for (int i = 0; i < 4; ++i) {
        x.outputs.push_back({slot(fmt::format("o{}_{}", r, n * 4 + i)), r, simplify(chunk * idxConst(4) + idxConst(i), extents_),
                             x.valueChunks % 16 != 0 && n + 1 == x.chunksPerThread ? chunk : nullptr,
                             fmt::format("eo{}_{}", r, n * 4 + i)});
        body.push_back(assign(x.outputs.back().reg, fconst(0.f)));
      }
    }
  for (int r = 0; r < 2; ++r)
    for (int64_t c = 0; c < x.keysPerThread; ++c)
      x.scores.push_back({slot(fmt::format("s{}_{}", r, c)), r, simplify(idxAdd(tx, 16 * c), extents_), nullptr,
                          fmt::format("kj{}_{}", r, c)});
  x.queryVectors.resize(2);
  x.keyVectors.resize(static_cast<size_t>(x.keysPerThread));
  x.probabilityVectors.resize(2);
  for (int i = 0; i < 4; ++i) {
    for (int r = 0; r < 2; ++r) {
      x.queryVectors[r].push_back(slot(fmt::format("q{}_{}", r, i)));
      x.probabilityVectors[r].push_back(slot(fmt::format("p{}_{}", r, i)));
    }
    for (int64_t c = 0; c < x.keysPerThread; ++c) x.keyVectors[c].push_back(slot(fmt::format("k{}_{}", c, i)));
    x.valueRegisters.push_back(slot(fmt::format("v{}", i)));
  }
}

// Tensor cores: the pair registers of q's, k's, p's and v's fragments (wgmma reads q and k, or v, from shared memory).
void KernelBuilder::flashFragmentRegisters(Flash& x) {
  const tile::FlashAttention& f = *x.schedule;
  const int64_t groups = x.groupsPerWarp, depthSteps = x.depthSteps;
  for (int64_t gr = 0; gr < groups && !f.scoresByWgmma; ++gr)
    for (int64_t st = 0; st < (x.qResident ? depthSteps : 1); ++st)
      for (int r = 0; r < 4; ++r)
        x.queryFragments[static_cast<size_t>(x.qResident ? gr * depthSteps + st : gr)].push_back(
            pairReg(fmt::format("rq{}_{}{}", st, r, flashGroupSuffix(gr))));
  for (int r = 0; r < 4 && !f.scoresByWgmma; ++r) x.keyFragments.push_back(pairReg(fmt::format("rk{}", r)));
  for (int64_t gr = 0; gr < groups; ++gr)
    for (int r = 0; r < 4; ++r) {
      x.probabilityPairs.push_back(pairReg(fmt::format("rp{}{}", r, flashGroupSuffix(gr))));
      if (gr == 0 && !f.valuesByWgmma) x.valueRegisters.push_back(pairReg(fmt::format("rv{}", r)));
    }
  if (f.valuesByWgmma)  // p of every 16 keys at once (each read until the step's wgmmas are waited for)
    for (int64_t kk = 1; kk < x.keysPerWarp / kMmaK; ++kk)
      for (int r = 0; r < 4; ++r) x.probabilityPairs.push_back(pairReg(fmt::format("rp{}_{}", r, kk)));
}

void KernelBuilder::flashAttention(const tile::FlashAttention& f) {
  Flash x = flashSetUp(f);
  Block& top = k_.body;
  Block body;
  flashCoordinates(x, top, body);
  flashKeyRange(x, body);
  // Blocks sharing the query block's steps (keyBlocks) may have none to walk (a short live length): they copy nothing.
  Block walkOwn;
  Block& walk = x.keyBlocks > 1 ? walkOwn : body;
  if (x.keyBlocks > 1) flashRegisters(x, body);
  flashPrologue(x, walk);
  if (x.keyBlocks == 1) flashRegisters(x, body);
  const int stepVar = freshKernelVar();
  extents_[stepVar] = x.steps;
  const Idx st = idxVar(stepVar, "st");
  if (f.scoresAhead) flashStepsAhead(x, st, stepVar, walk);
  else flashRingSteps(x, st, stepVar, walk);
  walk.push_back(cpAsyncWait(0));
  if (x.keyBlocks > 1) body.push_back(ifLess(x.firstStep, x.endStep, std::move(walkOwn)));

  flashFinish(x, body);
  if (f.packedPairs > 0) {  // a thread block's second group idles where it has no query block of its own
    top.push_back(ifLess(x.packedItem, idxConst(x.items), std::move(body)));
    return;
  }
  if (!f.pairBlocks) {
    top.insert(top.end(), body.begin(), body.end());
    return;
  }
  // The second query block's copies overwrite the slices (and the split's hand-over) the first one read last.
  body.push_back(barrier());
  top.push_back(forLoop(x.halfVar, "half", idxConst(0),
                        simplify(idxMin(idxConst(2), idxAdd(idxMul(x.position, -2), x.queryBlocks)), extents_), 1, std::move(body)));
}

}  // namespace kiln::kernel::detail
