// kernel-lower-from-tile for FlashAttention schedules (tile/ir.h): one block per 16, 32 or 64 query rows (block_q) of one
// (batch, head) point, a warp per 16 rows, the keys walked in steps of 64.
//
//   prologue: cp.async q's block_q rows and step s_begin's k and v rows into ring slot 0, then steps s_begin + 1 ..
//     s_begin + ring - 2 into the next slots; a commit group each
//   for st in [s_begin, s_end):                       (the steps some row of the block may see: tile::FlashAttention)
//     cp.async step st + ring - 1 (if any) into its slot; commit; wait for all but the ring - 1 newest groups; barrier
//     first step only: q's fragments by ldmatrix.x4 into pair registers (kept for every step)
//     S = q · kᵀ: per 16 of depth, k's fragments by ldmatrix.x4 and 8 mma.sync into 32 score accumulators per thread
//     s = score(S) per element (scale, masks; keys past the end are -inf; steps inside every row's mask bounds skip the
//       mask terms), the online softmax per row:
//       m' = max(m, rowmax s) over the quad's 4 lanes (shuffles); alpha = exp(m - m'); l *= alpha; O *= alpha;
//       p = exp(s - m'); l += p            (m' = -inf, a row that has seen no key yet, counts as 0)
//     O += p · v: p's accumulators are the A fragments of the next mma as they stand (the C layout of two 8-column tiles
//       is the A layout of one 16-deep step), packed to bf16 pairs once; v's fragments by ldmatrix.x4.trans
//     barrier (the slot is overwritten next step)
//   l summed over the quad; out = result(O / l) for the rows inside the query axis.
// Thread layout (kernel::mma): warp w works on row group rg = w mod (block_q / 16) and, with a key split, on share
// kh = w div (block_q / 16) of every step's keys; its lane l holds rows 16 rg + g and 16 rg + g + 8 (g = l / 4) at columns
// 2t, 2t + 1 (t = l % 4) of every 8-column tile. Pairing (pair_blocks) runs all of the above once per query block of the
// pair, with a barrier between.
//
// f32 (CUDA cores, tile::flashOnCudaCores): 8 x block_q threads; 16 lanes tx of a warp (lane bits 0, 2, 3, 4) hold rows
// ty and ty + block_q / 2 (ty = 2 warp + lane bit 1) and keys tx + 16 c of every step: S by ffma from 16-byte vectors of 4
// depths of q and k (two rows, block_kv / 16 keys: 6 shared loads per 32 multiply-adds at 64 keys), the row maxima and
// sums over the 16 lanes by shuffles; the probabilities go through a shared [block_q][block_kv + 4] slice (a barrier),
// read back 4 keys at a time, each multiplied with the 16-byte vectors of v's columns 4 (tx + 16 n) .. + 3.
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
}

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
  const int qs = sharedBuf("qs", sl.q), ks = sharedBuf("ks", R * sl.k), vs = sharedBuf("vs", R * sl.v);
  const int64_t KS = f.keySplit, rowGroups = BQ / 16, keysPerWarp = BKV / KS;
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
  unflatten(outer, floorDiv(bid, perRow), lk_.rowPoints() / Lq, top);
  Idx pb = defVar(top, "pb", mod(bid, perRow), perRow);
  for (size_t d = static_cast<size_t>(lk_.rowAxes) + 1; d < lk_.parallel.size(); ++d) {  // extent-1 axes after the width
    top.push_back(defIdx(lk_.parallel[d].var + kFirstLoopVar, lk_.parallel[d].name, idxConst(0)));
    extents_[lk_.parallel[d].var + kFirstLoopVar] = 1;
  }
  Block body;
  const int halfVar = freshKernelVar();
  extents_[halfVar] = 2;
  const Idx half = idxVar(halfVar, "half");
  Idx qb = f.pairBlocks ? defVar(body, "qb", idxAdd(idxMul(pb, -1), qBlocks - 1) + half * idxAdd(idxMul(pb, 2), 1 - qBlocks), qBlocks)
                        : defVar(body, "qb", idxAdd(idxMul(pb, -1), qBlocks - 1), qBlocks);
  const Idx q0 = simplify(qb * idxConst(BQ), extents_);
  Idx ct = defVar(top, "ct", threadIdx(), threads);
  Idx warp = defVar(top, "warp", floorDiv(threadIdx(), Target::kWarpSize), threads / Target::kWarpSize);
  Idx lane = defVar(top, "lane", mod(threadIdx(), Target::kWarpSize), Target::kWarpSize);
  Idx g, tq, rg, kh, keyBase, tx, ty;
  // The thread's two rows in the block: mma 16 rg + g (+ 8); CUDA cores ty (+ block_q / 2).
  std::array<Idx, 2> rowLocal;
  if (cuda) {
    // Lane bits 0, 2, 3, 4 make tx, bit 1 ty: lanes l and l ^ 1 read the same q (and p) row, l and l ^ 2 the same k row
    // and v columns, so each 16-byte shared load returns in two passes rather than four (lower_contraction_ffma.cpp).
    tx = defVar(top, "tx", mod(lane, 2) + floorDiv(lane, 4) * idxConst(2), 16);
    ty = defVar(top, "ty", warp * idxConst(2) + mod(floorDiv(lane, 2), 2), BQ / 2);
    rowLocal = {ty, simplify(idxAdd(ty, BQ / 2), extents_)};
  } else {
    g = defVar(top, "g", floorDiv(lane, 4), 8);
    tq = defVar(top, "tq", mod(lane, 4), 4);
    // Warp w holds rows 16 (w mod row groups) .. + 15 of the block and keys kh * keysPerWarp .. of every step.
    rg = defVar(top, "rg", mod(warp, rowGroups), rowGroups);
    kh = defVar(top, "kh", floorDiv(warp, rowGroups), KS);
    keyBase = simplify(kh * idxConst(keysPerWarp), extents_);
    rowLocal = {rg * idxConst(16) + g, rg * idxConst(16) + g + idxConst(8)};
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
  auto copyRows = [&](Block& out, int buf, const Idx& at, const loop::Expr& load, int rowVar, int64_t limit, const Idx& rowStart,
                      int64_t rows, int colVar, int64_t cols, int64_t stride) {
    const int64_t perCopy = Target::kVectorBytes / dtypeBytes(T);  // elements of one 16-byte copy
    const int64_t per = cols / perCopy, chunks = rows * per, bytes = Target::kVectorBytes;
    extents_[rowVar + kFirstLoopVar] = limit;
    extents_[colVar + kFirstLoopVar] = cols;
    const Idx source = flatIndex(load);
    auto chunk = [&](const Idx& e) {
      Idx r = simplify(floorDiv(e, per), extents_), c = simplify(mod(e, per) * idxConst(perCopy), extents_);
      Idx row = simplify(rowStart + r, extents_);
      Idx from = simplify(substitute(source, [&](int v, const std::string&) -> Idx {
                            return v == rowVar + kFirstLoopVar ? idxMin(row, idxConst(limit - 1)) : v == colVar + kFirstLoopVar ? c : nullptr;
                          }), extents_);
      Idx valid = simplify(idxMin(idxMax(idxMul(idxAdd(idxMul(row, -1), limit), bytes), idxConst(0)), idxConst(bytes)), extents_);
      return cpAsync(buf, simplify(at + r * idxConst(stride) + c, extents_), param(load.buffer, false), from,
                     static_cast<int>(bytes), valid);
    };
    if (chunks % threads == 0) {
      for (int64_t i = 0; i < chunks / threads; ++i) out.push_back(chunk(ct + idxConst(i * threads)));
      return;
    }
    int e = freshKernelVar();
    extents_[e] = chunks;
    out.push_back(forLoop(e, "e", ct, idxConst(chunks), threads, Block{chunk(idxVar(e, "e"))}));
  };
  auto copyKeys = [&](Block& out, const Idx& step, const Idx& slot) {
    const Idx start = simplify(step * idxConst(BKV), extents_);
    copyRows(out, ks, simplify(slot * idxConst(sl.k), extents_), *ops->k, a.key.var, Lk, start, BKV, depth.var, D, sl.depthStride);
    copyRows(out, vs, simplify(slot * idxConst(sl.v), extents_), *ops->v, a.key.var, Lk, start, BKV, width.var, E, sl.widthStride);
  };
  // Prologue: q with the first step, then the next ring - 2 steps (those that exist), one commit group each.
  copyRows(body, qs, idxConst(0), *ops->q, query.var, Lq, q0, BQ, depth.var, D, sl.depthStride);
  copyKeys(body, sBegin, idxConst(0));
  body.push_back(cpAsyncCommit());
  for (int64_t i = 1; i + 1 < R; ++i) {
    Block ahead;
    copyKeys(ahead, idxAdd(sBegin, i), idxConst(i));
    body.push_back(ifLess(idxAdd(sBegin, i), sEnd, std::move(ahead)));
    body.push_back(cpAsyncCommit());
  }

  // Per-thread state: running maximum and sum of its two rows, output accumulators, score accumulators, q fragments.
  const int64_t nTiles = keysPerWarp / kMmaN, eTiles = E / kMmaN, kSteps = D / kMmaK;
  std::array<int, 2> m{}, l{}, mSafe{}, alpha{};
  for (int r = 0; r < 2; ++r) {
    m[r] = slot(fmt::format("m{}", r));
    l[r] = slot(fmt::format("l{}", r));
    mSafe[r] = slot(fmt::format("ms{}", r));
    alpha[r] = slot(fmt::format("alpha{}", r));
    body.push_back(assign(m[r], fconst(-kInf)));
    body.push_back(assign(l[r], fconst(0.f)));
  }
  // The thread's score and output elements: register, which of its two rows, column (the key within the step, the
  // value column) and, on CUDA cores, the 4-column chunk of v whose existence guards an output (null: always there).
  struct Element {
    int reg, row;
    Idx col, chunk;
    std::string name;
  };
  std::vector<Element> scores, outputs;
  std::vector<std::array<int, 4>> o(static_cast<size_t>(eTiles)), s(static_cast<size_t>(nTiles));
  std::vector<std::vector<int>> qRegs(static_cast<size_t>(kSteps));
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
    for (int64_t j = 0; j < eTiles; ++j)
      for (int c = 0; c < 4; ++c) {
        o[j][c] = slot(fmt::format("o{}_{}", j, c));
        body.push_back(assign(o[j][c], fconst(0.f)));
        outputs.push_back({o[j][c], c / 2, simplify(idxConst(j * kMmaN + c % 2) + tq * idxConst(2), extents_), nullptr,
                           fmt::format("eo{}_{}", j, c)});
      }
    for (int64_t j = 0; j < nTiles; ++j)
      for (int c = 0; c < 4; ++c) {
        s[j][c] = slot(fmt::format("s{}_{}", j, c));
        scores.push_back({s[j][c], c / 2, keyBase + idxConst(j * kMmaN + c % 2) + tq * idxConst(2), nullptr, fmt::format("kj{}_{}", j, c)});
      }
    for (int64_t st = 0; st < kSteps; ++st)
      for (int r = 0; r < 4; ++r) qRegs[st].push_back(pairReg(fmt::format("rq{}_{}", st, r)));
    for (int r = 0; r < 4; ++r) kRegs.push_back(pairReg(fmt::format("rk{}", r)));
    for (int r = 0; r < 4; ++r) {
      pRegs.push_back(pairReg(fmt::format("rp{}", r)));
      vRegs.push_back(pairReg(fmt::format("rv{}", r)));
    }
  }
  const int tmp = slot("sh");
  const std::vector<int> rowLanes = cuda ? std::vector<int>{1, 4, 8, 16} : std::vector<int>{1, 2};  // lanes sharing a row

  Block step;
  const int stepVar = freshKernelVar();
  extents_[stepVar] = steps;
  const Idx st = idxVar(stepVar, "st");
  Idx ring = defVar(step, "slot", mod(st + idxMul(sBegin, -1), R), R);
  {
    Block next;
    Idx nextSlot = defVar(next, "next_slot", mod(st + idxMul(sBegin, -1) + idxConst(R - 1), R), R);
    copyKeys(next, idxAdd(st, R - 1), nextSlot);
    step.push_back(ifLess(idxAdd(st, R - 1), sEnd, std::move(next)));
  }
  step.push_back(cpAsyncCommit());
  step.push_back(cpAsyncWait(static_cast<int>(R - 1)));
  step.push_back(barrier());
  if (!cuda) {
    Block loadQ;
    for (int64_t kk = 0; kk < kSteps; ++kk) {
      Idx row = rg * idxConst(16) + mod(lane, 16), col = idxConst(kk * kMmaK) + floorDiv(lane, 16) * idxConst(8);
      loadQ.push_back(ldmatrixPairs(qs, simplify(row * idxConst(sl.depthStride) + col, extents_), false, qRegs[kk]));
    }
    step.push_back(ifLess(st, idxAdd(sBegin, 1), std::move(loadQ)));
  }
  // S = q · kᵀ
  if (cuda) {  // per 4 depths: the two rows of q and the thread's keys as 16-byte vectors, then 4 x 2 x keys multiply-adds
    for (const Element& e : scores) step.push_back(assign(e.reg, fconst(0.f)));
    const int dVar = freshKernelVar();
    extents_[dVar] = D;
    const Idx dd = idxVar(dVar, "dd");
    Block inner;
    for (int r = 0; r < 2; ++r)
      inner.push_back(loadSharedVector(qs, simplify(rowLocal[r] * idxConst(sl.depthStride) + dd, extents_), qVec[r]));
    for (int64_t c = 0; c < keysPerThread; ++c)
      inner.push_back(loadSharedVector(ks, simplify(ring * idxConst(sl.k) + idxAdd(tx, 16 * c) * idxConst(sl.depthStride) + dd, extents_),
                                       kVec[c]));
    for (int i = 0; i < 4; ++i)
      for (int r = 0; r < 2; ++r)
        for (int64_t c = 0; c < keysPerThread; ++c)
          inner.push_back(multiplyAdd(scores[static_cast<size_t>(r * keysPerThread + c)].reg, qVec[r][i], kVec[c][i]));
    step.push_back(forLoop(dVar, "dd", idxConst(0), idxConst(D), 4, std::move(inner)));
  }
  for (int64_t j = 0; j < nTiles && !cuda; ++j)
    for (int c = 0; c < 4; ++c) step.push_back(assign(s[j][c], fconst(0.f)));
  for (int64_t kk = 0; kk < kSteps && !cuda; ++kk)
    for (int64_t j = 0; j < nTiles; j += 2) {
      Idx row = keyBase + idxConst(j * kMmaN) + floorDiv(lane, 16) * idxConst(8) + mod(lane, 8);
      Idx col = idxConst(kk * kMmaK) + mod(floorDiv(lane, 8), 2) * idxConst(8);
      step.push_back(ldmatrixPairs(ks, simplify(ring * idxConst(sl.k) + row * idxConst(sl.depthStride) + col, extents_), false, kRegs));
      step.push_back(mmaFromPairs(T, qRegs[kk], {kRegs[0], kRegs[1]}, {s[j][0], s[j][1], s[j][2], s[j][3]}));
      step.push_back(mmaFromPairs(T, qRegs[kk], {kRegs[2], kRegs[3]}, {s[j + 1][0], s[j + 1][1], s[j + 1][2], s[j + 1][3]}));
    }
  // Scores: the kernel's score expression at each element's query row and key (clamped inside the axes; keys past the
  // end are -inf).
  // (Rows and keys are named only where the score reads them.)
  const bool scoreReadsRow = loop::usesVar(*a.score, query.var), scoreReadsKey = loop::usesVar(*a.score, a.key.var);
  std::array<Idx, 2> rowAt;
  for (int r = 0; r < 2 && scoreReadsRow; ++r) {
    int v = freshLoopVar();
    step.push_back(defIdx(v + kFirstLoopVar, fmt::format("qi{}", r), simplify(idxMin(q0 + rowLocal[r], idxConst(Lq - 1)), extents_)));
    extents_[v + kFirstLoopVar] = Lq;
    rowAt[r] = idxVar(v, fmt::format("qi{}", r));
  }
  // A step whose every key lies inside every row's bounds and the key axis (interior) takes the score without its mask
  // terms (loop::unmaskedScore); the others (the diagonal of a causal mask, the edge of a window, the last keys) the
  // whole score. `outside` > 0 exactly when the step is not interior (block-uniform).
  Idx outside = idxMax(idxAdd(st * idxConst(BKV), BKV - Lk), idxConst(0));
  if (f.keyTo) outside = outside + idxMax(idxAdd(st * idxConst(BKV) + idxMul(q0, -1), BKV - *f.keyTo), idxConst(0));
  if (f.keyFrom) outside = outside + idxMax(idxAdd(q0 + idxMul(st * idxConst(BKV), -1), BQ - 1 + *f.keyFrom), idxConst(0));
  outside = simplify(outside, extents_);
  const loop::ExprP unmasked = loop::unmaskedScore(lk_, f.queryAxis);
  Block interior, edge;
  for (const Element& el : scores) {
    Idx key = simplify(st * idxConst(BKV) + el.col, extents_);
    int v = freshLoopVar();
    if (scoreReadsKey) step.push_back(defIdx(v + kFirstLoopVar, el.name, simplify(idxMin(key, idxConst(Lk - 1)), extents_)));
    extents_[v + kFirstLoopVar] = Lk;
    accs_ = {el.reg};
    for (bool masked : {false, true}) {
      Block& out = masked ? edge : interior;
      loop::ExprP e = masked ? a.score : unmasked;
      if (scoreReadsRow) e = atAxis(e, query.var, rowAt[static_cast<size_t>(el.row)]);
      if (scoreReadsKey) e = atAxis(e, a.key.var, idxVar(v, el.name));
      Cse cse;
      FE value = lower(e, out, cse);
      if (masked && Lk % BKV != 0) value = fselect(key, idxConst(Lk), value, fconst(-kInf));
      out.push_back(assign(el.reg, value));
    }
  }
  step.push_back(ifLess(outside, idxConst(1), std::move(interior)));
  step.push_back(ifLess(idxConst(0), outside, std::move(edge)));
  // Online softmax per row. Maxima and sums over a thread's 16 elements of a row are balanced trees (depth 4, not a
  // chain of 16 dependent instructions).
  auto tree = [](Fn fn, std::vector<FE> xs) {
    while (xs.size() > 1) {
      std::vector<FE> next;
      for (size_t i = 0; i + 1 < xs.size(); i += 2) next.push_back(fapply(fn, {xs[i], xs[i + 1]}));
      if (xs.size() % 2) next.push_back(xs.back());
      xs = std::move(next);
    }
    return xs[0];
  };
  for (int r = 0; r < 2; ++r) {
    const int mNew = mSafe[r];
    std::vector<FE> row;
    for (const Element& e : scores)
      if (e.row == r) row.push_back(fvar(e.reg));
    step.push_back(assign(mNew, fapply(Fn::Max, {fvar(m[r]), tree(Fn::Max, row)})));
    for (int lanes : rowLanes) {
      step.push_back(shuffleXor(tmp, mNew, lanes));
      step.push_back(assign(mNew, fapply(Fn::Max, {fvar(mNew), fvar(tmp)})));
    }
    // alpha from the old maximum, then m = m'; m' counts as 0 while it is -inf (every score so far masked).
    FE safe = fapply(Fn::Where, {fapply(Fn::Eq, {fvar(mNew), fconst(-kInf)}), fconst(0.f), fvar(mNew)});
    step.push_back(assign(alpha[r], fapply(Fn::Exp, {fapply(Fn::Sub, {fvar(m[r]), safe})})));
    step.push_back(assign(m[r], fvar(mNew)));
    step.push_back(assign(mNew, safe));
    step.push_back(assign(l[r], fapply(Fn::Mul, {fvar(l[r]), fvar(alpha[r])})));
    for (const Element& e : outputs)
      if (e.row == r) step.push_back(assign(e.reg, fapply(Fn::Mul, {fvar(e.reg), fvar(alpha[r])})));
    for (const Element& e : scores)
      if (e.row == r) step.push_back(assign(e.reg, fapply(Fn::Exp, {fapply(Fn::Sub, {fvar(e.reg), fvar(mNew)})})));
    step.push_back(assign(l[r], fapply(Fn::Add, {fvar(l[r]), tree(Fn::Add, row)})));
  }
  // CUDA cores: O += p · v through the shared p slice, 4 keys at a time: the two rows' probabilities as vectors, then per
  // key each of the thread's 4-column chunks of v as a vector, 4 x 2 multiply-adds.
  if (cuda) {
    for (const Element& e : scores)
      step.push_back(storeShared(ps, simplify(rowLocal[static_cast<size_t>(e.row)] * idxConst(sl.pStride) + e.col, extents_), fvar(e.reg)));
    step.push_back(barrier());
    const int kVar = freshKernelVar();  // keys 4 kq .. 4 kq + 3 of the step
    extents_[kVar] = BKV / 4;
    const Idx kk = simplify(idxVar(kVar, "kq") * idxConst(4), extents_);
    Block inner;
    for (int r = 0; r < 2; ++r)
      inner.push_back(loadSharedVector(ps, simplify(rowLocal[r] * idxConst(sl.pStride) + kk, extents_), pVec[r]));
    for (int i = 0; i < 4; ++i)
      for (int64_t n = 0; n < chunks; ++n) {
        Block use;
        const Element& first = outputs[static_cast<size_t>(n * 4)];
        use.push_back(loadSharedVector(vs, simplify(ring * idxConst(sl.v) + idxAdd(kk, i) * idxConst(sl.widthStride) + first.col, extents_), vRegs));
        for (int r = 0; r < 2; ++r)
          for (int j = 0; j < 4; ++j) use.push_back(multiplyAdd(outputs[static_cast<size_t>((r * chunks + n) * 4 + j)].reg, pVec[r][i], vRegs[j]));
        if (first.chunk) inner.push_back(ifLess(first.chunk, idxConst(valueChunks), std::move(use)));
        else inner.insert(inner.end(), use.begin(), use.end());
      }
    step.push_back(forLoop(kVar, "kq", idxConst(0), idxConst(BKV / 4), 1, std::move(inner)));
  }
  // O += p · v, 16 keys per mma step: p packed once into the A registers (a01 a23 a45 a67 = the C fragments of the step's
  // two 8-key tiles), v's B fragments by ldmatrix.x4.trans (matrices: keys 0-7 and 8-15 of two 8-column tiles).
  for (int64_t kk = 0; kk < keysPerWarp / kMmaK && !cuda; ++kk) {
    const auto& lo = s[static_cast<size_t>(2 * kk)];
    const auto& hi = s[static_cast<size_t>(2 * kk + 1)];
    step.push_back(packPair(T, pRegs[0], lo[0], lo[1]));
    step.push_back(packPair(T, pRegs[1], lo[2], lo[3]));
    step.push_back(packPair(T, pRegs[2], hi[0], hi[1]));
    step.push_back(packPair(T, pRegs[3], hi[2], hi[3]));
    for (int64_t j = 0; j < eTiles; j += 2) {
      Idx row = keyBase + idxConst(kk * kMmaK) + mod(floorDiv(lane, 8), 2) * idxConst(8) + mod(lane, 8);
      Idx col = idxConst(j * kMmaN) + floorDiv(lane, 16) * idxConst(8);
      step.push_back(ldmatrixPairs(vs, simplify(ring * idxConst(sl.v) + row * idxConst(sl.widthStride) + col, extents_), true, vRegs));
      step.push_back(mmaFromPairs(T, pRegs, {vRegs[0], vRegs[1]}, {o[j][0], o[j][1], o[j][2], o[j][3]}));
      step.push_back(mmaFromPairs(T, pRegs, {vRegs[2], vRegs[3]}, {o[j + 1][0], o[j + 1][1], o[j + 1][2], o[j + 1][3]}));
    }
  }
  step.push_back(barrier());
  body.push_back(forLoop(stepVar, "st", sBegin, sEnd, 1, std::move(step)));
  body.push_back(cpAsyncWait(0));

  // Each row's sum over the lanes sharing it (in every warp: shuffles are warp-collective).
  for (int r = 0; r < 2; ++r)
    for (int lanes : rowLanes) {
      body.push_back(shuffleXor(tmp, l[r], lanes));
      body.push_back(assign(l[r], fapply(Fn::Add, {fvar(l[r]), fvar(tmp)})));
    }
  // Warps of keys 1.. hand their maxima, sums and outputs to the warp of keys 0 of their rows (same lane, same elements),
  // which rescales both to the larger maximum and adds: value i of thread (rg, lane) of warp kh at
  // comb[((kh - 1) * values + i) * rowGroups * 32 + rg * 32 + lane].
  Block& out = body;
  Block finish;
  if (KS > 1) {
    const int64_t values = tile::flashCombineValues(E), lanes = rowGroups * Target::kWarpSize;
    std::vector<int> mine{m[0], m[1], l[0], l[1]};
    for (int64_t j = 0; j < eTiles; ++j)
      for (int c = 0; c < 4; ++c) mine.push_back(o[j][c]);
    const Idx thread = simplify(rg * idxConst(Target::kWarpSize) + lane, extents_);
    auto at = [&](const Idx& partner, int64_t i) { return simplify((partner * idxConst(values) + idxConst(i)) * idxConst(lanes) + thread, extents_); };
    Block hand;
    for (int64_t i = 0; i < values; ++i) hand.push_back(storeShared(comb, at(idxAdd(kh, -1), i), fvar(mine[static_cast<size_t>(i)])));
    out.push_back(ifLess(idxConst(0), kh, std::move(hand)));
    out.push_back(barrier());
    for (int64_t partner = 0; partner + 1 < KS; ++partner) {
      auto theirs = [&](int64_t i) { return loadShared(comb, at(idxConst(partner), i)); };
      for (int r = 0; r < 2; ++r) {
        FE big = fapply(Fn::Max, {fvar(m[r]), theirs(r)});
        finish.push_back(assign(mSafe[r], big));
        FE safe = fapply(Fn::Where, {fapply(Fn::Eq, {fvar(mSafe[r]), fconst(-kInf)}), fconst(0.f), fvar(mSafe[r])});
        finish.push_back(assign(alpha[r], fapply(Fn::Exp, {fapply(Fn::Sub, {fvar(m[r]), safe})})));
        finish.push_back(assign(tmp, fapply(Fn::Exp, {fapply(Fn::Sub, {theirs(r), safe})})));
        finish.push_back(assign(m[r], fvar(mSafe[r])));
        finish.push_back(assign(l[r], fapply(Fn::Add, {fapply(Fn::Mul, {fvar(l[r]), fvar(alpha[r])}), fapply(Fn::Mul, {theirs(2 + r), fvar(tmp)})})));
        for (int64_t j = 0; j < eTiles; ++j)
          for (int c = 2 * r; c < 2 * r + 2; ++c)
            finish.push_back(assign(o[j][c], fapply(Fn::Add, {fapply(Fn::Mul, {fvar(o[j][c]), fvar(alpha[r])}),
                                                            fapply(Fn::Mul, {theirs(4 + j * 4 + c), fvar(tmp)})})));
      }
    }
  }
  // out = result(O / l) per element of the block's rows inside the query axis (the warps of keys 0 only).
  for (int r = 0; r < 2; ++r) {
    finish.push_back(assign(l[r], fapply(Fn::Div, {fconst(1.f), fvar(l[r])})));
    Block store;
    const Idx row = simplify(q0 + rowLocal[r], extents_);
    int rowVar = freshLoopVar();
    store.push_back(defIdx(rowVar + kFirstLoopVar, fmt::format("qo{}", r), row));
    extents_[rowVar + kFirstLoopVar] = Lq;
    for (const Element& e : outputs) {
      if (e.row != r) continue;
      Block one;
      int colVar = freshLoopVar();
      one.push_back(defIdx(colVar + kFirstLoopVar, e.name, e.col));
      extents_[colVar + kFirstLoopVar] = E;
      one.push_back(assign(e.reg, fapply(Fn::Mul, {fvar(e.reg), fvar(l[r])})));
      accs_ = {e.reg};
      Cse cse;
      loop::ExprP result = atAxis(atAxis(lk_.result, query.var, idxVar(rowVar, fmt::format("qo{}", r))), width.var, idxVar(colVar, e.name));
      FE value = lower(result, one, cse);
      std::vector<Idx> at;
      for (const loop::Axis& ax : lk_.parallel)
        at.push_back(ax.var == query.var ? idxVar(rowVar + kFirstLoopVar, fmt::format("qo{}", r))
                     : ax.var == width.var ? idxVar(colVar + kFirstLoopVar, e.name) : var(ax));
      one.push_back(storeGlobal(0, rowMajor(at, tp_.loop.buffers[static_cast<size_t>(lk_.output)].shape, extents_), value));
      if (e.chunk) store.push_back(ifLess(e.chunk, idxConst(valueChunks), std::move(one)));
      else store.insert(store.end(), one.begin(), one.end());
    }
    finish.push_back(ifLess(row, idxConst(Lq), std::move(store)));
  }
  if (KS > 1) out.push_back(ifLess(kh, idxConst(1), std::move(finish)));
  else out.insert(out.end(), finish.begin(), finish.end());
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
