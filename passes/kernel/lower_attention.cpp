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
// This file sets the kernel up (buffers, coordinates, registers, copies) and assembles the step loop; the step's parts
// (S, the scores, the online softmax, P·V) and the end (key-split combine, the output) are in lower_attention_step.cpp.
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

// The statements of two independent blocks (neither reads what the other writes) in one, b's spread evenly among a's,
// each in its own order: nvcc schedules within a basic block from the order it is given, and a warp issues in order, so
// b's tensor-core work then issues between a's dependent steps rather than after them.
Block interleaved(Block a, Block b) {
  Block out;
  size_t taken = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    out.push_back(std::move(a[i]));
    for (const size_t due = (i + 1) * b.size() / a.size(); taken < due; ++taken) out.push_back(std::move(b[taken]));
  }
  for (; taken < b.size(); ++taken) out.push_back(std::move(b[taken]));
  return out;
}
}  // namespace

void KernelBuilder::flashAttention(const tile::FlashAttention& f) {
  const loop::OnlineSoftmax& a = *lk_.attention;
  const auto ops = loop::flashAttentionOperands(tp_.loop, lk_);
  KILN_ASSERT(ops, "kernel {}: flash_attention on operands it cannot copy", lk_.name);
  const tile::FlashSlices sl = tile::flashSlices(f, lk_);
  const loop::Axis& query = lk_.parallel[static_cast<size_t>(f.queryAxis)];
  const loop::Axis& width = lk_.parallel[static_cast<size_t>(lk_.rowAxes)];
  const loop::Axis& depth = a.dot.axes[0];
  const int64_t D = ops->depth, E = ops->width, BQ = f.blockQ, BKV = f.blockKV, Lq = query.extent, Lk = a.key.extent;
  const int64_t threads = tile::threadsPerBlock(f), qBlocks = tile::flashQueryBlocks(f, lk_), steps = (Lk + BKV - 1) / BKV;
  const DType T = f.mmaType;
  const bool cuda = tile::flashOnCudaCores(f);
  k_.block = {threads, 1, 1};
  k_.grid = {tile::gridBlocks(f, lk_), 1, 1};
  extents_[kThreadIdx] = threads;
  extents_[kBlockIdx] = k_.grid[0];
  auto sharedBuf = [&](const char* name, int64_t elements) {
    k_.shared.push_back(SharedBuffer{name, elements, T, true});
    return static_cast<int>(k_.shared.size()) - 1;
  };
  const int64_t R = f.ring;
  const bool wgmmaReads = f.scoresByWgmma || f.valuesByWgmma;  // shared slices a wgmma reads: fence.proxy.async after copies
  const int qs = sharedBuf("qs", sl.q), ks = sharedBuf("ks", R * sl.k), vs = sharedBuf("vs", R * sl.v);
  // G row groups of 16 per warp; rowGroups warps along the block's rows (each with KS warps sharing its rows).
  const int64_t G = cuda ? 1 : f.warpRows / 16, KS = f.keySplit, rowGroups = BQ / (16 * G), keysPerWarp = BKV / KS;
  const bool qResident = cuda || tile::flashQueriesResident(f, D);
  int ps = -1;  // CUDA cores: a step's probabilities
  if (cuda) {
    k_.shared.push_back(SharedBuffer{"ps", sl.p, DType::F32, true});
    ps = static_cast<int>(k_.shared.size()) - 1;
  }
  int comb = -1;
  if (KS > 1) {
    k_.shared.push_back(SharedBuffer{"comb", sl.combine, DType::F32, true});
    comb = static_cast<int>(k_.shared.size()) - 1;
  }
  k_.dynamicSharedBytes = k_.dynamicBuffersBytes();

  // Block coordinates: the query block, last blocks first (under a causal mask they see the most keys), then the other
  // row axes. Paired (pairBlocks): block b of a row's P = ceil(QB / 2) takes query block QB - 1 - b, then b (the middle
  // one once when QB is odd), in a loop whose body is everything below.
  Block& top = k_.body;
  // signed: the expressions below subtract (a grid of one block names no block: nvcc refuses unused variables)
  Idx bid = k_.grid[0] > 1 ? defVar(top, "bid", blockIdx(), k_.grid[0]) : idxConst(0);
  const int64_t perRow = f.pairBlocks ? (qBlocks + 1) / 2 : qBlocks;
  std::vector<loop::Axis> outer;
  for (int d = 0; d < lk_.rowAxes; ++d)
    if (d != f.queryAxis) outer.push_back(lk_.parallel[static_cast<size_t>(d)]);
  const int64_t rowCount = lk_.rowPoints() / Lq;
  // packedPairs: the kernel's block b is group b mod 2 of thread block b div 2 and takes item `item` of the query blocks
  // listed heaviest first (row item mod R, position item div R of QB - 1, .., 0), none where item is N (see
  // FlashAttention::packedPairs and packedItem).
  const int64_t items = rowCount * qBlocks;
  Idx item;
  if (f.packedPairs > 0) {
    k_.groups = 2;
    item = defVar(top, "item", packedItem(bid, f.packedPairs, items), items + 1);
    bid = defVar(top, "it", idxMin(item, idxConst(items - 1)), items);  // in range where `item` names none (guarded below)
  }
  // rowsInner: block b takes row b mod R and position pb = b div R of the order QB - 1, .., QB - H, 0, .., QB - H - 1
  // (FlashAttention::rowsInner); otherwise row b div QB, position b mod QB of QB - 1, .., 0.
  const bool inner = f.rowsInner || f.packedPairs > 0;
  unflatten(outer, inner ? mod(bid, rowCount) : floorDiv(bid, perRow), rowCount, top);
  Idx pb = defVar(top, "pb", inner ? floorDiv(bid, rowCount) : mod(bid, perRow), perRow);
  for (size_t d = static_cast<size_t>(lk_.rowAxes) + 1; d < lk_.parallel.size(); ++d) {  // extent-1 axes after the width
    top.push_back(defIdx(lk_.parallel[d].var + kFirstLoopVar, lk_.parallel[d].name, idxConst(0)));
    extents_[lk_.parallel[d].var + kFirstLoopVar] = 1;
  }
  Block body;
  const int halfVar = freshKernelVar();
  extents_[halfVar] = 2;
  const Idx half = idxVar(halfVar, "half");
  const int64_t heavy = (qBlocks + 1) / 2;  // rowsInner: positions pb >= heavy (light = 1) take query block pb - heavy
  Idx qb = f.pairBlocks ? defVar(body, "qb", idxAdd(idxMul(pb, -1), qBlocks - 1) + half * idxAdd(idxMul(pb, 2), 1 - qBlocks), qBlocks)
           : f.rowsInner ? defVar(body, "qb", idxAdd(idxMul(pb, -1), qBlocks - 1) +
                                                  floorDiv(pb, heavy) * idxAdd(idxMul(pb, 2), 1 - heavy - qBlocks), qBlocks)
                         : defVar(body, "qb", idxAdd(idxMul(pb, -1), qBlocks - 1), qBlocks);
  const Idx q0 = simplify(qb * idxConst(BQ), extents_);
  Idx ct = defVar(top, "ct", threadIdx(), threads);
  Idx warp = defVar(top, "warp", floorDiv(threadIdx(), Target::kWarpSize), threads / Target::kWarpSize);
  Idx lane = defVar(top, "lane", mod(threadIdx(), Target::kWarpSize), Target::kWarpSize);
  Idx g, tq, rg, kh, keyBase, tx, ty;
  // The thread's rows in the block: mma 16 (G rg + gr) + g (+ 8) for its row groups gr; CUDA cores ty (+ block_q / 2).
  std::vector<Idx> rowLocal;
  if (cuda) {
    // Lane bits 0, 2, 3, 4 make tx, bit 1 ty: lanes l and l ^ 1 read the same q (and p) row, l and l ^ 2 the same k row
    // and v columns, so each 16-byte shared load returns in two passes rather than four (lower_contraction_ffma.cpp).
    tx = defVar(top, "tx", mod(lane, 2) + floorDiv(lane, 4) * idxConst(2), 16);
    ty = defVar(top, "ty", warp * idxConst(2) + mod(floorDiv(lane, 2), 2), BQ / 2);
    rowLocal = {ty, simplify(idxAdd(ty, BQ / 2), extents_)};
  } else {
    g = defVar(top, "g", floorDiv(lane, 4), 8);
    tq = defVar(top, "tq", mod(lane, 4), 4);
    // Warp w holds rows 16 G (w mod rowGroups) .. + 16 G - 1 of the block and keys kh * keysPerWarp .. of every step.
    rg = defVar(top, "rg", mod(warp, rowGroups), rowGroups);
    kh = defVar(top, "kh", floorDiv(warp, rowGroups), KS);
    keyBase = simplify(kh * idxConst(keysPerWarp), extents_);
    for (int64_t gr = 0; gr < G; ++gr) {
      const Idx base = simplify(rg * idxConst(16 * G) + idxConst(16 * gr), extents_);
      rowLocal.push_back(simplify(base + g, extents_));
      rowLocal.push_back(simplify(base + g + idxConst(8), extents_));
    }
  }

  // The steps of keys the block's rows may see.
  Idx first = idxConst(0), end = idxConst(steps);
  if (f.keyFrom) first = floorDiv(idxMax(idxConst(0), idxAdd(q0, *f.keyFrom)), BKV);
  if (f.keyTo) {
    Idx lastRow = idxMin(idxAdd(q0, BQ - 1), idxConst(Lq - 1));
    end = floorDiv(idxAdd(idxMin(idxConst(Lk), idxAdd(lastRow, *f.keyTo)), BKV - 1), BKV);
  }
  Idx sBegin = defVar(body, "s_begin", first, steps + 1), sEnd = defVar(body, "s_end", end, steps + 1);

  // cp.async of `rows` rows (from rowStart, rows past `limit` zero-filled) of operand `load` into buf at `at`: rows of
  // `cols` elements along colVar, `stride` apart. Thread ct copies 16-byte chunks ct, ct + threads, ...
  // With `swizzled` (operands a wgmma reads: q and k for the scores, v for P·V; cols a multiple of 64) the slice is, per
  // block of 64 columns h, rows of 64 elements under the 128-byte swizzle instead: element (r, c) at h * rows * 64 +
  // r * 64 + ((c mod 64) / 8 ^ r mod 8) * 8 + c mod 8, and chunk e is block e div (8 rows), row (e div 8) mod rows,
  // chunk e mod 8 of the row's 64 columns: a warp fills 4 whole rows (no bank conflicts), and wgmma reads it without the
  // conflicts of 8 x 8 core matrices laid side by side (30 % slower P·V on the H200, 18ce6e8).
  auto copyRows = [&](Block& out, int buf, const Idx& at, const loop::Expr& load, int rowVar, int64_t limit, const Idx& rowStart,
                      int64_t rows, int colVar, int64_t cols, int64_t stride, bool swizzled = false) {
    const int64_t perCopy = Target::kVectorBytes / dtypeBytes(T);  // elements of one 16-byte copy
    const int64_t per = cols / perCopy, chunks = rows * per, bytes = Target::kVectorBytes;
    extents_[rowVar + kFirstLoopVar] = limit;
    extents_[colVar + kFirstLoopVar] = cols;
    const Idx source = flatIndex(load);
    // Copies start at a multiple of `rows` below `limit`: when `rows` divides `limit`, no row passes it (no clamp, whole
    // copies).
    const bool whole = limit % rows == 0;
    auto chunk = [&](const Idx& e) {
      Idx r = simplify(swizzled ? mod(floorDiv(e, 8), rows) : floorDiv(e, per), extents_);
      Idx c = simplify(swizzled ? floorDiv(e, 8 * rows) * idxConst(64) + mod(e, 8) * idxConst(8) : mod(e, per) * idxConst(perCopy),
                       extents_);
      Idx to = simplify(swizzled ? at + floorDiv(e, 8 * rows) * idxConst(rows * 64) + r * idxConst(64) +
                                       idxXor(mod(e, 8), mod(r, 8)) * idxConst(8)
                                 : at + r * idxConst(stride) + c, extents_);
      Idx row = simplify(rowStart + r, extents_);
      Idx from = simplify(substitute(source, [&](int v, const std::string&) -> Idx {
                            return v == rowVar + kFirstLoopVar ? (whole ? row : idxMin(row, idxConst(limit - 1)))
                                   : v == colVar + kFirstLoopVar ? c : nullptr;
                          }), extents_);
      Idx valid = whole ? idxConst(bytes)
                        : simplify(idxMin(idxMax(idxMul(idxAdd(idxMul(row, -1), limit), bytes), idxConst(0)), idxConst(bytes)), extents_);
      return cpAsync(buf, to, param(load.buffer, false), from, static_cast<int>(bytes), valid);
    };
    if (chunks % threads == 0) {
      for (int64_t i = 0; i < chunks / threads; ++i) out.push_back(chunk(ct + idxConst(i * threads)));
      return;
    }
    int e = freshKernelVar();
    extents_[e] = chunks;
    out.push_back(forLoop(e, "e", ct, idxConst(chunks), threads, Block{chunk(idxVar(e, "e"))}));
  };
  auto copyK = [&](Block& out, const Idx& step, const Idx& slot) {
    copyRows(out, ks, simplify(slot * idxConst(sl.k), extents_), *ops->k, a.key.var, Lk, simplify(step * idxConst(BKV), extents_),
             BKV, depth.var, D, sl.depthStride, f.scoresByWgmma);
  };
  auto copyV = [&](Block& out, const Idx& step, const Idx& slot) {
    copyRows(out, vs, simplify(slot * idxConst(sl.v), extents_), *ops->v, a.key.var, Lk, simplify(step * idxConst(BKV), extents_),
             BKV, width.var, E, sl.widthStride, f.valuesByWgmma);
  };
  auto copyKeys = [&](Block& out, const Idx& step, const Idx& slot) {
    copyK(out, step, slot);
    copyV(out, step, slot);
  };
  // Prologue: q with the first step, then the next ring - 2 steps (those that exist), one commit group each. (Scores a
  // step ahead: q with the first step's k only; the rest below.)
  copyRows(body, qs, idxConst(0), *ops->q, query.var, Lq, q0, BQ, depth.var, D, sl.depthStride, f.scoresByWgmma);
  if (f.scoresAhead) copyK(body, sBegin, idxConst(0));
  else copyKeys(body, sBegin, idxConst(0));
  body.push_back(cpAsyncCommit());
  for (int64_t i = 1; i + 1 < R && !f.scoresAhead; ++i) {
    Block ahead;
    copyKeys(ahead, idxAdd(sBegin, i), idxConst(i));
    body.push_back(ifLess(idxAdd(sBegin, i), sEnd, std::move(ahead)));
    body.push_back(cpAsyncCommit());
  }

  // Per-thread state: running maximum and sum of its two rows, output accumulators, score accumulators, q fragments.
  const int64_t nTiles = keysPerWarp / kMmaN, eTiles = E / kMmaN, kSteps = D / kMmaK;
  const int rows = static_cast<int>(rowLocal.size());
  std::vector<int> m(rows), l(rows), mSafe(rows), alpha(rows);
  for (int r = 0; r < rows; ++r) {
    m[r] = slot(fmt::format("m{}", r));
    l[r] = slot(fmt::format("l{}", r));
    mSafe[r] = slot(fmt::format("ms{}", r));
    alpha[r] = slot(fmt::format("alpha{}", r));
    body.push_back(assign(m[r], fconst(-kInf)));
    if (!f.rowSumsByMma) body.push_back(assign(l[r], fconst(0.f)));  // (by mma: l is the ls accumulators' at the end)
  }
  using Element = Flash::Element;  // the thread's score and output elements
  std::vector<Element> scores, outputs;
  std::vector<std::array<int, 4>> o(static_cast<size_t>(G * eTiles)), s(static_cast<size_t>(G * nTiles));
  std::vector<std::vector<int>> qRegs(static_cast<size_t>(qResident ? G * kSteps : G));
  // Register names: row group 0's as with one group; the second's end in _g1.
  auto group = [](int64_t gr) { return gr == 0 ? std::string() : fmt::format("_g{}", gr); };
  std::vector<int> kRegs, pRegs, vRegs;
  // CUDA cores: keys tx + 16 c (c < keysPerThread) and value chunks tx + 16 n (n < chunks, 4 columns each) per row.
  const int64_t keysPerThread = BKV / 16, valueChunks = E / 4, chunks = (valueChunks + 15) / 16;
  std::vector<std::vector<int>> qVec(2), kVec(static_cast<size_t>(keysPerThread)), pVec(2);
  if (cuda) {
    for (int r = 0; r < 2; ++r)
      for (int64_t n = 0; n < chunks; ++n) {
        Idx chunk = simplify(idxAdd(tx, 16 * n), extents_);
        for (int i = 0; i < 4; ++i) {
          outputs.push_back({slot(fmt::format("o{}_{}", r, n * 4 + i)), r, simplify(chunk * idxConst(4) + idxConst(i), extents_),
                             valueChunks % 16 != 0 && n + 1 == chunks ? chunk : nullptr, fmt::format("eo{}_{}", r, n * 4 + i)});
          body.push_back(assign(outputs.back().reg, fconst(0.f)));
        }
      }
    for (int r = 0; r < 2; ++r)
      for (int64_t c = 0; c < keysPerThread; ++c)
        scores.push_back({slot(fmt::format("s{}_{}", r, c)), r, simplify(idxAdd(tx, 16 * c), extents_), nullptr, fmt::format("kj{}_{}", r, c)});
    for (int i = 0; i < 4; ++i) {
      for (int r = 0; r < 2; ++r) {
        qVec[r].push_back(slot(fmt::format("q{}_{}", r, i)));
        pVec[r].push_back(slot(fmt::format("p{}_{}", r, i)));
      }
      for (int64_t c = 0; c < keysPerThread; ++c) kVec[c].push_back(slot(fmt::format("k{}_{}", c, i)));
      vRegs.push_back(slot(fmt::format("v{}", i)));
    }
  } else {
    for (int64_t gr = 0; gr < G; ++gr)
      for (int64_t j = 0; j < eTiles; ++j)
        for (int c = 0; c < 4; ++c) {
          auto& reg = o[static_cast<size_t>(gr * eTiles + j)][c];
          reg = slot(fmt::format("o{}_{}{}", j, c, group(gr)));
          body.push_back(assign(reg, fconst(0.f)));
          outputs.push_back({reg, static_cast<int>(2 * gr) + c / 2, simplify(idxConst(j * kMmaN + c % 2) + tq * idxConst(2), extents_),
                             nullptr, fmt::format("eo{}_{}{}", j, c, group(gr))});
        }
    for (int64_t gr = 0; gr < G; ++gr)
      for (int64_t j = 0; j < nTiles; ++j)
        for (int c = 0; c < 4; ++c) {
          auto& reg = s[static_cast<size_t>(gr * nTiles + j)][c];
          reg = slot(fmt::format("s{}_{}{}", j, c, group(gr)));
          scores.push_back({reg, static_cast<int>(2 * gr) + c / 2, keyBase + idxConst(j * kMmaN + c % 2) + tq * idxConst(2), nullptr,
                            fmt::format("kj{}_{}{}", j, c, group(gr))});
        }
    for (int64_t gr = 0; gr < G && !f.scoresByWgmma; ++gr)  // (wgmma reads q and k from shared memory)
      for (int64_t st = 0; st < (qResident ? kSteps : 1); ++st)
        for (int r = 0; r < 4; ++r)
          qRegs[static_cast<size_t>(qResident ? gr * kSteps + st : gr)].push_back(pairReg(fmt::format("rq{}_{}{}", st, r, group(gr))));
    for (int r = 0; r < 4 && !f.scoresByWgmma; ++r) kRegs.push_back(pairReg(fmt::format("rk{}", r)));
    for (int64_t gr = 0; gr < G; ++gr)
      for (int r = 0; r < 4; ++r) {
        pRegs.push_back(pairReg(fmt::format("rp{}{}", r, group(gr))));
        if (gr == 0 && !f.valuesByWgmma) vRegs.push_back(pairReg(fmt::format("rv{}", r)));
      }
    if (f.valuesByWgmma)  // p of every 16 keys at once (each read until the step's wgmmas are waited for)
      for (int64_t kk = 1; kk < keysPerWarp / kMmaK; ++kk)
        for (int r = 0; r < 4; ++r) pRegs.push_back(pairReg(fmt::format("rp{}_{}", r, kk)));
  }
  // Row sums by mma (FlashAttention::rowSumsByMma): per row group an accumulator tile, and a pair of ones.
  std::vector<std::array<int, 4>> lsum;
  int ones = -1;
  if (f.rowSumsByMma) {
    for (int64_t gr = 0; gr < G; ++gr) {
      lsum.emplace_back();
      for (int c = 0; c < 4; ++c) {
        lsum.back()[c] = slot(fmt::format("ls{}{}", c, group(gr)));
        body.push_back(assign(lsum.back()[c], fconst(0.f)));
      }
    }
    const int one = slot("one");
    body.push_back(assign(one, fconst(1.f)));
    ones = pairReg("rones");
    body.push_back(packPair(T, ones, one, one));
  }
  const int tmp = slot("sh");
  const std::vector<int> rowLanes = cuda ? std::vector<int>{1, 4, 8, 16} : std::vector<int>{1, 2};  // lanes sharing a row

  // The score's constant factor, taken out of the scores into the exponentials (Flash::scale). Without key bounds (no
  // mask keyBounds recognises, or one that leaves some row no key) every step takes the whole score, masks included.
  const auto scale = flashScoreScale(f.keyFrom || f.keyTo ? loop::unmaskedScore(lk_, f.queryAxis) : a.score);
  // What the step's parts and the end share (lower_attention_step.cpp).
  Flash x{&f, &a, sl, query, width, D, E, BQ, BKV, Lq, Lk, KS, rowGroups, keysPerWarp, nTiles, eTiles, kSteps,
           keysPerThread, valueChunks, chunks, T, cuda, qs, ks, vs, ps, comb, q0, lane, rg, kh, keyBase, tx,
           rowLocal, m, l, mSafe, alpha, scores, outputs, o, s, G, qResident, qRegs, qVec, kVec, pVec, kRegs, pRegs, vRegs,
           tmp, rowLanes, scale.first, scale.second, lsum, ones};
  const int stepVar = freshKernelVar();
  extents_[stepVar] = steps;
  const Idx st = idxVar(stepVar, "st");
  auto loadQueries = [&](Block& out) {
    for (int64_t gr = 0; gr < G; ++gr)
      for (int64_t kk = 0; kk < kSteps; ++kk)
        out.push_back(ldmatrixPairs(qs, flashQueryFragment(x, gr, kk), false, qRegs[static_cast<size_t>(gr * kSteps + kk)]));
  };
  if (f.scoresAhead) {
    // The scores a step ahead (FlashAttention::scoresAhead): k of step s + 1 and v of step s in the slots of step s + 1
    // and s (mod 2). Prologue: q and k of the first step landed, its scores into the ahead set; then v of the first step
    // with k of the second (already issued), v of the second with k of the third.
    std::vector<std::array<int, 4>> ahead(s.size());
    for (size_t i = 0; i < s.size(); ++i)
      for (int c = 0; c < 4; ++c) ahead[i][c] = slot(fmt::format("sa{}_{}{}", i % static_cast<size_t>(nTiles), c,
                                                                 group(static_cast<int64_t>(i) / nTiles)));
    copyV(body, sBegin, idxConst(0));
    {
      Block k1;
      copyK(k1, idxAdd(sBegin, 1), idxConst(1));
      body.push_back(ifLess(idxAdd(sBegin, 1), sEnd, std::move(k1)));
    }
    body.push_back(cpAsyncCommit());
    body.push_back(cpAsyncWait(1));
    if (f.scoresByWgmma) body.push_back(fenceProxyAsync());  // the landed q and k become visible to wgmma's reads
    body.push_back(barrier());
    if (qResident && !f.scoresByWgmma) loadQueries(body);
    flashProduct(x, idxConst(0), ahead, body);
    body.push_back(barrier());  // (every warp's k reads of slot 0 before its next copy)
    {
      Block v1, k2;
      copyV(v1, idxAdd(sBegin, 1), idxConst(1));
      copyK(k2, idxAdd(sBegin, 2), idxConst(0));
      body.push_back(ifLess(idxAdd(sBegin, 1), sEnd, std::move(v1)));
      body.push_back(ifLess(idxAdd(sBegin, 2), sEnd, std::move(k2)));
      body.push_back(cpAsyncCommit());
    }
    // Step st: wait for its v and the next step's k; take the scores multiplied ahead, apply the score expression;
    // multiply the next step's scores, spread through this step's softmax; P·V; then (the slots free) copy v of step
    // st + 2 and k of step st + 3. The last step multiplies nothing ahead: it follows the loop, on its own.
    // By wgmma: the next step's group is issued first (before the score expression: it reads only shared memory and
    // the ahead set, just copied out) and waited for after P·V, before the barrier that frees its k slot.
    auto walkStep = [&](const Idx& at, bool last, Block& step) {
      Idx vSlot = defVar(step, last ? "last_slot" : "slot", mod(at + idxMul(sBegin, -1), 2), 2);
      step.push_back(cpAsyncWait(1));
      if (wgmmaReads) step.push_back(fenceProxyAsync());  // the next step's k and this step's v become visible to wgmma's reads
      step.push_back(barrier());
      for (size_t i = 0; i < s.size(); ++i)
        for (int c = 0; c < 4; ++c) step.push_back(assign(s[i][c], fvar(ahead[i][c])));
      auto nextSlot = [&] { return defVar(step, "next_slot", mod(at + idxMul(sBegin, -1) + idxConst(1), 2), 2); };
      Idx kSlot;
      if (!last && f.scoresByWgmma) {
        kSlot = nextSlot();
        flashProduct(x, kSlot, ahead, step, false);
      }
      flashScores(x, at, step);
      Block softmax, next;
      flashSoftmax(x, softmax);
      if (!last && !f.scoresByWgmma) {
        kSlot = nextSlot();
        flashProduct(x, kSlot, ahead, next);
      }
      Block both = interleaved(std::move(softmax), std::move(next));
      step.insert(step.end(), both.begin(), both.end());
      flashValues(x, vSlot, step);
      if (last) return;
      if (f.scoresByWgmma) step.push_back(wgmmaWait(0));
      step.push_back(barrier());
      Block v2, k3;
      copyV(v2, idxAdd(at, 2), vSlot);
      copyK(k3, idxAdd(at, 3), kSlot);
      step.push_back(ifLess(idxAdd(at, 2), sEnd, std::move(v2)));
      step.push_back(ifLess(idxAdd(at, 3), sEnd, std::move(k3)));
      step.push_back(cpAsyncCommit());
    };
    Block step, last;
    walkStep(st, false, step);
    body.push_back(forLoop(stepVar, "st", sBegin, idxAdd(sEnd, -1), 1, std::move(step)));
    walkStep(idxAdd(sEnd, -1), true, last);
    body.push_back(ifLess(sBegin, sEnd, std::move(last)));  // (every block's rows see some key: always)
  } else {
    Block step;
    Idx ring = defVar(step, "slot", mod(st + idxMul(sBegin, -1), R), R);
    {
      Block next;
      Idx nextSlot = defVar(next, "next_slot", mod(st + idxMul(sBegin, -1) + idxConst(R - 1), R), R);
      copyKeys(next, idxAdd(st, R - 1), nextSlot);
      step.push_back(ifLess(idxAdd(st, R - 1), sEnd, std::move(next)));
    }
    step.push_back(cpAsyncCommit());
    step.push_back(cpAsyncWait(static_cast<int>(R - 1)));
    if (wgmmaReads) step.push_back(fenceProxyAsync());  // the landed q, k and v become visible to wgmma's reads
    step.push_back(barrier());
    if (!cuda && qResident && !f.scoresByWgmma) {
      Block loadQ;
      loadQueries(loadQ);
      step.push_back(ifLess(st, idxAdd(sBegin, 1), std::move(loadQ)));
    }
    flashProduct(x, ring, s, step);
    flashScores(x, st, step);
    flashSoftmax(x, step);
    flashValues(x, ring, step);
    step.push_back(barrier());
    body.push_back(forLoop(stepVar, "st", sBegin, sEnd, 1, std::move(step)));
  }
  body.push_back(cpAsyncWait(0));

  flashFinish(x, body);
  if (f.packedPairs > 0) {  // a thread block's second group idles where it has no query block of its own
    top.push_back(ifLess(item, idxConst(items), std::move(body)));
    return;
  }
  if (!f.pairBlocks) {
    top.insert(top.end(), body.begin(), body.end());
    return;
  }
  // The second query block's copies overwrite the slices (and the split's hand-over) the first one read last.
  body.push_back(barrier());
  top.push_back(forLoop(halfVar, "half", idxConst(0), simplify(idxMin(idxConst(2), idxAdd(idxMul(pb, -2), qBlocks)), extents_), 1,
                        std::move(body)));
}

}  // namespace kiln::kernel::detail
