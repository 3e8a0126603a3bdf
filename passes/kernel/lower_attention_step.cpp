// kernel-lower-from-tile for FlashAttention schedules, the parts of a key step and the end (lower_attention.cpp sets the
// kernel up and assembles the loop; its header describes the whole kernel): S = q · kᵀ on tensor cores (ldmatrix, mma.sync)
// or CUDA cores (16-byte vectors, ffma), the score expression per element (mask-free on interior steps), the online
// softmax per row, O += p · v, and after the loop the combine of key-split warps and the output's store.
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

FE exp2Of(FE d, float factor) { return fapply(Fn::Exp2, {fapply(Fn::Mul, {std::move(d), fconst(factor)})}); }

float KernelBuilder::Flash::exp2Factor() const { return static_cast<float>(scale * 1.4426950408889634); }

std::pair<float, loop::ExprP> flashScoreScale(const loop::ExprP& unmasked) {
  using K = loop::Expr::Kind;
  if (unmasked->kind == K::Apply && unmasked->fn == Fn::Mul)
    for (int i = 0; i < 2; ++i) {
      const loop::ExprP& c = unmasked->args[static_cast<size_t>(i)];
      if (c->kind == K::Imm && c->imm > 0.f && std::isfinite(c->imm) && std::isfinite(1.f / c->imm))
        return {c->imm, unmasked->args[static_cast<size_t>(1 - i)]};
    }
  return {1.f, unmasked};
}

void KernelBuilder::flashProduct(const Flash& x, const Idx& ring, const std::vector<std::array<int, 4>>& s, Block& step, bool wait) {
  using Element = Flash::Element;
  const tile::FlashAttention& f = *x.schedule;
  const tile::FlashSlices& sl = x.slices;
  const int64_t D = x.depth, BKV = x.keyBlock, nTiles = x.keyTiles, kSteps = x.depthSteps, keysPerThread = x.keysPerThread;
  const DType T = x.operandType;
  const bool cuda = x.onCudaCores;
  const int qs = x.qSlice, ks = x.kRing;
  const Idx& lane = x.lane;
  const Idx& keyBase = x.keyBase;
  const Idx& tx = x.columnLane;
  const std::vector<Idx>& rowLocal = x.rowLocal;
  const std::vector<Element>& scores = x.scores;
  const int64_t G = x.groupsPerWarp;
  const std::vector<std::vector<int>>& qRegs = x.queryFragments;
  const std::vector<std::vector<int>>& qVec = x.queryVectors;
  const std::vector<std::vector<int>>& kVec = x.keyVectors;
  const std::vector<int>& kRegs = x.keyFragments;
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
  } else if (f.scoresByWgmma) {  // per 16 of depth one wgmma m64n{block_kv}k16 of the warpgroup: the block's q by the step's k
    for (const auto& tile : s)
      for (int c = 0; c < 4; ++c) step.push_back(assign(tile[c], fconst(0.f)));
    step.push_back(wgmmaFence());
    std::vector<int> acc;  // accumulator 4j + c: tile j's c (kernel::wgmmaElement is the mma C layout of warp w's rows)
    for (const auto& tile : s) acc.insert(acc.end(), tile.begin(), tile.end());
    // q and k in rows of 64 depths under the 128-byte swizzle (copyRows): 16 depths kk start at column 16 (kk mod 4) of
    // the first row of 64-depth block kk / 4.
    const Stmt::CoreMatrices rows{0, 512, true};
    for (int64_t kk = 0; kk < kSteps; ++kk) {
      const int64_t at = 16 * (kk % 4), block = kk / 4;
      step.push_back(wgmma(T, x.qSlice, idxConst(block * x.queryBlock * 64 + at), rows, ks,
                           simplify(ring * idxConst(sl.k) + idxConst(block * BKV * 64 + at), extents_), rows, BKV, acc));
    }
    step.push_back(wgmmaCommit());
    if (wait) step.push_back(wgmmaWait(0));
  } else {  // per 16 of depth: k's fragments by ldmatrix.x4, two mma.sync per pair of 8-key tiles and row group
    for (const auto& tile : s)
      for (int c = 0; c < 4; ++c) step.push_back(assign(tile[c], fconst(0.f)));
    for (int64_t kk = 0; kk < kSteps; ++kk) {
      if (!x.qResident)
        for (int64_t gr = 0; gr < G; ++gr)
          step.push_back(ldmatrixPairs(x.qSlice, flashQueryFragment(x, gr, kk), false, qRegs[static_cast<size_t>(gr)]));
      for (int64_t j = 0; j < nTiles; j += 2) {
        Idx row = keyBase + idxConst(j * kMmaN) + floorDiv(lane, 16) * idxConst(8) + mod(lane, 8);
        Idx col = idxConst(kk * kMmaK) + mod(floorDiv(lane, 8), 2) * idxConst(8);
        step.push_back(ldmatrixPairs(ks, simplify(ring * idxConst(sl.k) + row * idxConst(sl.depthStride) + col, extents_), false, kRegs));
        for (int64_t gr = 0; gr < G; ++gr) {
          const std::vector<int>& q = qRegs[static_cast<size_t>(x.qResident ? gr * kSteps + kk : gr)];
          const auto& lo = s[static_cast<size_t>(gr * nTiles + j)];
          const auto& hi = s[static_cast<size_t>(gr * nTiles + j + 1)];
          step.push_back(mmaFromPairs(T, q, {kRegs[0], kRegs[1]}, {lo[0], lo[1], lo[2], lo[3]}));
          step.push_back(mmaFromPairs(T, q, {kRegs[2], kRegs[3]}, {hi[0], hi[1], hi[2], hi[3]}));
        }
      }
    }
  }
}

void KernelBuilder::flashScores(const Flash& x, const Idx& st, Block& step) {
  using Element = Flash::Element;
  const tile::FlashAttention& f = *x.schedule;
  const loop::OnlineSoftmax& a = *x.softmax;
  const loop::Axis& query = x.queryAxis;
  const int64_t BQ = x.queryBlock, BKV = x.keyBlock, Lq = x.queries, Lk = x.keys;
  const Idx& q0 = x.firstQuery;
  const std::vector<Idx>& rowLocal = x.rowLocal;
  const std::vector<Element>& scores = x.scores;
  // Scores: the kernel's score expression at each element's query row and key (clamped inside the axes; keys past the
  // end are -inf).
  // (Rows and keys are named only where the score reads them.)
  const bool scoreReadsRow = loop::usesVar(*a.score, query.var), scoreReadsKey = loop::usesVar(*a.score, a.key.var);
  std::vector<Idx> rowAt(rowLocal.size()), rowIdx(rowLocal.size());
  for (size_t r = 0; r < rowLocal.size() && scoreReadsRow; ++r) {
    int v = freshLoopVar();
    step.push_back(defIdx(v + kFirstLoopVar, fmt::format("qi{}", r), simplify(idxMin(q0 + rowLocal[r], idxConst(Lq - 1)), extents_)));
    extents_[v + kFirstLoopVar] = Lq;
    rowAt[r] = idxVar(v, fmt::format("qi{}", r));
    rowIdx[r] = idxVar(v + kFirstLoopVar, fmt::format("qi{}", r));
  }
  // A step whose every key lies inside every row's bounds and the key axis (interior) takes the score without its mask
  // terms (loop::unmaskedScore); the others (the diagonal of a causal mask, the edge of a window, the last keys) the
  // whole score. `outside` > 0 exactly when the step is not interior (block-uniform).
  Idx outside = idxMax(idxAdd(st * idxConst(BKV), BKV - Lk), idxConst(0));
  if (f.keyTo) outside = outside + idxMax(idxAdd(st * idxConst(BKV) + idxMul(q0, -1), BKV - *f.keyTo), idxConst(0));
  if (f.keyFrom) outside = outside + idxMax(idxAdd(q0 + idxMul(st * idxConst(BKV), -1), BQ - 1 + *f.keyFrom), idxConst(0));
  outside = simplify(outside, extents_);
  // On the other steps, where the schedule carries the mask's key bounds (f.keyFrom, f.keyTo: every select keyBounds
  // recognised, and no other), a key outside a row's bounds is -inf and one inside takes the interior's raw score: one
  // comparison and one select per bound, where the whole score would scale, add its masks and unscale (five
  // instructions an element on TinyLlama's diagonal steps). Exact: inside the bounds every recognised select keeps its
  // score, and outside one of them masks it, to a value whose probability is 0 (each row keeps a key; keyBounds).
  const bool bounded = (f.keyFrom || f.keyTo) && scoreReadsRow;  // (bounds come from selects on the row: always both)
  // A score that reads a buffer (a mask kept as a weight or an input: padding, or one that leaves some row no key) is
  // held at or above kMaskedScore: a masked value such as -3.4e38 times the exponentials' factor c log2 e would overflow
  // to -inf, and a row whose every key is masked would turn NaN (-inf minus -inf) where LibTorch's softmax gives the row
  // equal weights. Every value at or below kMaskedScore means masked (loop/attention.h), and such a row's equal values
  // give it equal weights here too. A score of -inf stays -inf: a row whose every score is -inf sums no weight (l = 0),
  // and its output is NaN (0 / 0) as a plain softmax's, or 0 where the softmax is PyTorch attention's safe one
  // (OnlineSoftmax::emptyRowsZero). One max, compare and select an element, only in those kernels.
  bool readsBuffer = false;
  loop::forEachLoad(a.score, [&](const loop::Expr&) { readsBuffer = true; });
  Block interior, edge;
  for (const Element& el : scores) {
    Idx key = simplify(st * idxConst(BKV) + el.col, extents_);
    int v = freshLoopVar();
    if (scoreReadsKey) step.push_back(defIdx(v + kFirstLoopVar, el.name, simplify(idxMin(key, idxConst(Lk - 1)), extents_)));
    extents_[v + kFirstLoopVar] = Lk;
    accs_ = {el.reg};
    for (bool masked : {false, true}) {
      Block& out = masked ? edge : interior;
      const bool wholeScore = masked && !bounded;
      loop::ExprP e = wholeScore ? a.score : x.rawScore;
      if (scoreReadsRow) e = atAxis(e, query.var, rowAt[static_cast<size_t>(el.row)]);
      if (scoreReadsKey) e = atAxis(e, a.key.var, idxVar(v, el.name));
      Cse cse;
      FE value = lower(e, out, cse);
      if (wholeScore && x.scale != 1.f) value = fapply(Fn::Mul, {value, fconst(1.f / x.scale)});  // raw (masked: -inf or -1e30 / c)
      if (readsBuffer) {  // (raw: the score over c); -inf stays -inf, so that a row of -inf scores is one (above)
        const FE held = fapply(Fn::Max, {value, fconst(loop::kMaskedScore / x.scale)});
        value = fapply(Fn::Where, {fapply(Fn::Eq, {value, fconst(-kInf)}), fconst(-kInf), held});
      }
      if (masked && bounded) {
        // (rowAt and the key's variable name Loop-IR variables, for atAxis; here the Kernel IR's, kFirstLoopVar on.)
        const Idx row = rowIdx[static_cast<size_t>(el.row)], at = scoreReadsKey ? idxVar(v + kFirstLoopVar, el.name) : key;
        if (f.keyTo) value = fselect(at, simplify(row + idxConst(*f.keyTo), extents_), value, fconst(-kInf));
        if (f.keyFrom) value = fselect(at, simplify(row + idxConst(*f.keyFrom), extents_), fconst(-kInf), value);
      }
      if (masked && Lk % BKV != 0) value = fselect(key, idxConst(Lk), value, fconst(-kInf));
      if (value->kind == FExpr::Kind::Var && value->var == el.reg) continue;  // the raw score is the accumulator itself
      out.push_back(assign(el.reg, value));
    }
  }
  if (!interior.empty()) step.push_back(ifLess(outside, idxConst(1), std::move(interior)));
  step.push_back(ifLess(idxConst(0), outside, std::move(edge)));
}

void KernelBuilder::flashSoftmax(const Flash& x, Block& step) {
  using Element = Flash::Element;
  const std::vector<int>& m = x.runningMax;
  const std::vector<int>& l = x.runningSum;
  const std::vector<int>& mSafe = x.safeMax;
  const std::vector<int>& alpha = x.rescale;
  const std::vector<Element>& scores = x.scores;
  const std::vector<Element>& outputs = x.outputs;
  const int tmp = x.shuffleSlot;
  const std::vector<int>& rowLanes = x.rowLanes;
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
  for (int r = 0; r < static_cast<int>(m.size()); ++r) {
    const int mNew = mSafe[r];
    std::vector<FE> row;
    for (const Element& e : scores)
      if (e.row == r) row.push_back(fvar(e.reg));
    step.push_back(assign(mNew, fapply(Fn::Max, {fvar(m[r]), tree(Fn::Max, row)})));
    for (int lanes : rowLanes) {
      step.push_back(shuffleXor(tmp, mNew, lanes));
      step.push_back(assign(mNew, fapply(Fn::Max, {fvar(mNew), fvar(tmp)})));
    }
    // alpha from the old maximum, then m = m'; m' counts as 0 while it is -inf (every score so far masked). In base 2
    // (Flash::scale): alpha = 2^((m - m') c log2 e), p = 2^(s c log2 e - m' c log2 e), a multiply-add before the ex2.
    const float factor = x.exp2Factor();
    FE safe = fapply(Fn::Where, {fapply(Fn::Eq, {fvar(mNew), fconst(-kInf)}), fconst(0.f), fvar(mNew)});
    step.push_back(assign(alpha[r], exp2Of(fapply(Fn::Sub, {fvar(m[r]), safe}), factor)));
    step.push_back(assign(m[r], fvar(mNew)));
    step.push_back(assign(mNew, fapply(Fn::Mul, {safe, fconst(factor)})));
    if (x.sumTiles.empty()) step.push_back(assign(l[r], fapply(Fn::Mul, {fvar(l[r]), fvar(alpha[r])})));
    else  // row r is row group r / 2's row g (c0, c1) or g + 8 (c2, c3)
      for (int c = 2 * (r % 2); c < 2 * (r % 2) + 2; ++c) {
        const int reg = x.sumTiles[static_cast<size_t>(r / 2)][c];
        step.push_back(assign(reg, fapply(Fn::Mul, {fvar(reg), fvar(alpha[r])})));
      }
    for (const Element& e : outputs)
      if (e.row == r) step.push_back(assign(e.reg, fapply(Fn::Mul, {fvar(e.reg), fvar(alpha[r])})));
    for (const Element& e : scores)
      if (e.row == r)
        step.push_back(assign(e.reg, fapply(Fn::Exp2, {fapply(Fn::Sub, {fapply(Fn::Mul, {fvar(e.reg), fconst(factor)}), fvar(mNew)})})));
    if (x.sumTiles.empty()) step.push_back(assign(l[r], fapply(Fn::Add, {fvar(l[r]), tree(Fn::Add, row)})));
  }
}

void KernelBuilder::flashValues(const Flash& x, const Idx& ring, Block& step) {
  using Element = Flash::Element;
  const tile::FlashSlices& sl = x.slices;
  const int64_t BKV = x.keyBlock, keysPerWarp = x.keysPerWarp, eTiles = x.widthTiles, valueChunks = x.valueChunks,
      chunks = x.chunksPerThread;
  const DType T = x.operandType;
  const bool cuda = x.onCudaCores;
  const int vs = x.vRing, ps = x.pSlice;
  const Idx& lane = x.lane;
  const Idx& keyBase = x.keyBase;
  const std::vector<Idx>& rowLocal = x.rowLocal;
  const std::vector<Element>& scores = x.scores;
  const std::vector<Element>& outputs = x.outputs;
  const std::vector<std::array<int, 4>>& o = x.outputTiles;
  const std::vector<std::array<int, 4>>& s = x.scoreTiles;
  const std::vector<std::vector<int>>& pVec = x.probabilityVectors;
  const std::vector<int>& pRegs = x.probabilityPairs;
  const std::vector<int>& vRegs = x.valueRegisters;
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
    return;
  }
  // O += p · v, 16 keys per mma step: p packed once into the A registers (a01 a23 a45 a67 = the C fragments of the step's
  // two 8-key tiles), v's B fragments by ldmatrix.x4.trans (matrices: keys 0-7 and 8-15 of two 8-column tiles).
  // With two row groups, each v fragment feeds both groups' mma.
  // By wgmma (FlashAttention::valuesByWgmma; one row group): p of every 16 keys packed into its own 4 registers (all
  // read until the wait), then one wgmma m64n{width}k16 per 16 keys from them and the slot's v (per block of 64 columns,
  // rows of 64 under the 128-byte swizzle: wgmma's transposed B, see copyRows) into the output accumulators, in the
  // accumulator order of kernel::wgmmaElement (tile j's c0..c3); waited for at once (the step's end frees v's slot and
  // reads the accumulators next).
  const int64_t G = x.groupsPerWarp, nTiles = x.keyTiles, E = x.width;
  const bool byWgmma = x.schedule->valuesByWgmma;
  for (int64_t kk = 0; kk < keysPerWarp / kMmaK; ++kk) {
    std::vector<std::vector<int>> p(static_cast<size_t>(G));
    for (int64_t gr = 0; gr < G; ++gr) {
      const auto& lo = s[static_cast<size_t>(gr * nTiles + 2 * kk)];
      const auto& hi = s[static_cast<size_t>(gr * nTiles + 2 * kk + 1)];
      const int64_t first = byWgmma ? 4 * kk : 4 * gr;
      p[static_cast<size_t>(gr)].assign(pRegs.begin() + first, pRegs.begin() + first + 4);
      const std::vector<int>& a = p[static_cast<size_t>(gr)];
      step.push_back(packPair(T, a[0], lo[0], lo[1]));
      step.push_back(packPair(T, a[1], lo[2], lo[3]));
      step.push_back(packPair(T, a[2], hi[0], hi[1]));
      step.push_back(packPair(T, a[3], hi[2], hi[3]));
      if (!x.sumTiles.empty())  // the row sums: the same A fragment times ones
        step.push_back(mmaFromPairs(T, a, {x.onesPair, x.onesPair}, {x.sumTiles[static_cast<size_t>(gr)][0], x.sumTiles[static_cast<size_t>(gr)][1],
                                                             x.sumTiles[static_cast<size_t>(gr)][2], x.sumTiles[static_cast<size_t>(gr)][3]}));
    }
    for (int64_t j = 0; j < (byWgmma ? 0 : eTiles); j += 2) {  // (by wgmma: after the packing, below)
      Idx row = keyBase + idxConst(kk * kMmaK) + mod(floorDiv(lane, 8), 2) * idxConst(8) + mod(lane, 8);
      Idx col = idxConst(j * kMmaN) + floorDiv(lane, 16) * idxConst(8);
      step.push_back(ldmatrixPairs(vs, simplify(ring * idxConst(sl.v) + row * idxConst(sl.widthStride) + col, extents_), true, vRegs));
      for (int64_t gr = 0; gr < G; ++gr) {
        const auto& lo = o[static_cast<size_t>(gr * eTiles + j)];
        const auto& hi = o[static_cast<size_t>(gr * eTiles + j + 1)];
        step.push_back(mmaFromPairs(T, p[static_cast<size_t>(gr)], {vRegs[0], vRegs[1]}, {lo[0], lo[1], lo[2], lo[3]}));
        step.push_back(mmaFromPairs(T, p[static_cast<size_t>(gr)], {vRegs[2], vRegs[3]}, {hi[0], hi[1], hi[2], hi[3]}));
      }
    }
  }
  if (!byWgmma) return;
  std::vector<int> acc;
  for (const auto& tile : o) acc.insert(acc.end(), tile.begin(), tile.end());
  const Stmt::CoreMatrices rows{512, BKV * 64, true, true};  // 8 keys: 512 elements; blocks of 64 columns: BKV rows of 64
  step.push_back(wgmmaFence());
  for (int64_t kk = 0; kk < keysPerWarp / kMmaK; ++kk) {
    const std::vector<int> a(pRegs.begin() + 4 * kk, pRegs.begin() + 4 * kk + 4);
    step.push_back(wgmmaRegA(T, a, vs, simplify(ring * idxConst(sl.v) + idxConst(kk * kMmaK * 64), extents_), rows, E, acc));
  }
  step.push_back(wgmmaCommit());
  step.push_back(wgmmaWait(0));
}

Idx KernelBuilder::flashQueryFragment(const Flash& x, int64_t gr, int64_t kk) {
  Idx row = x.rowGroup * idxConst(16 * x.groupsPerWarp) + idxConst(16 * gr) + mod(x.lane, 16);
  Idx col = idxConst(kk * kMmaK) + floorDiv(x.lane, 16) * idxConst(8);
  return simplify(row * idxConst(x.slices.depthStride) + col, extents_);
}

bool KernelBuilder::flashStagesOutput(const Flash& x) const {
  return !x.onCudaCores && x.keySplit == 1 && x.keyBlocks == 1 && x.rowsTaken == x.queryBlock && x.width % 8 == 0 &&
         x.slices.widthStride % 8 == 0 &&
         k_.params[0].dtype == x.operandType && x.queryBlock * x.slices.widthStride <= x.schedule->ring * x.slices.v;
}

void KernelBuilder::flashFinish(const Flash& x, Block& body) {
  const std::vector<int>& l = x.runningSum;
  // Each row's sum over the lanes sharing it (in every warp: shuffles are warp-collective).
  // With row sums by mma, each lane's accumulator already holds its rows' whole sums.
  for (int r = 0; r < static_cast<int>(x.rowLocal.size()); ++r) {
    if (!x.sumTiles.empty()) {
      body.push_back(assign(l[r], fvar(x.sumTiles[static_cast<size_t>(r / 2)][2 * (r % 2)])));
      continue;
    }
    for (int lanes : x.rowLanes) {
      body.push_back(shuffleXor(x.shuffleSlot, l[r], lanes));
      body.push_back(assign(l[r], fapply(Fn::Add, {fvar(l[r]), fvar(x.shuffleSlot)})));
    }
  }
  Block finish;  // what the warps of keys 0 do (every warp without a key split)
  if (x.keySplit > 1) flashCombineWarps(x, body, finish);
  if (x.keyBlocks > 1) {
    Block store;
    flashStoreOutput(x, body, store);
    flashCombineBlocks(x, body, std::move(finish), std::move(store));
    return;
  }
  flashStoreOutput(x, body, finish);
  if (x.keySplit > 1) body.push_back(ifLess(x.keyShare, idxConst(1), std::move(finish)));
  else body.insert(body.end(), finish.begin(), finish.end());
}

// out = result(O / l) per element of the block's rows inside the query axis (the warps of keys 0 only): stored from the
// registers element by element, or (flashStagesOutput) staged as rows in the v ring, which no step reads any more, and
// stored 16 bytes at a time: whole 32-byte sectors instead of 2-byte stores to eight rows per instruction.
void KernelBuilder::flashStoreOutput(const Flash& x, Block& out, Block& finish) {
  using Element = Flash::Element;
  const loop::Axis& query = x.queryAxis;
  const loop::Axis& width = x.widthAxis;
  const int64_t E = x.width, Lq = x.queries, valueChunks = x.valueChunks;
  const Idx& q0 = x.firstQuery;
  const std::vector<Idx>& rowLocal = x.rowLocal;
  const std::vector<int>& l = x.runningSum;
  const tile::FlashSlices& sl = x.slices;
  const bool staged = flashStagesOutput(x);
  const Shape& outShape = tp_.loop.buffers[static_cast<size_t>(lk_.output)].shape;
  auto outputAt = [&](const Idx& row, const Idx& col) {
    std::vector<Idx> at;
    for (const loop::Axis& ax : lk_.parallel) at.push_back(ax.var == query.var ? row : ax.var == width.var ? col : var(ax));
    return rowMajor(at, outShape, extents_);
  };
  if (staged) {  // no thread may stage into the ring while another's last copies into it could still land
    out.push_back(barrier());
  }
  for (int r = 0; r < static_cast<int>(rowLocal.size()); ++r) {
    FE inverse = fapply(Fn::Div, {fconst(1.f), fvar(l[r])});
    if (x.softmax->emptyRowsZero)  // a row that saw no key (every score -inf): output 0, not 0 / 0
      inverse = fapply(Fn::Where, {fapply(Fn::Eq, {fvar(l[r]), fconst(0.f)}), fconst(0.f), inverse});
    finish.push_back(assign(l[r], inverse));
    Block store;
    const Idx row = simplify(q0 + rowLocal[r], extents_);
    int rowVar = freshLoopVar();
    if (!staged || loop::usesVar(*lk_.result, query.var))  // (named only where used: nvcc refuses unused variables)
      store.push_back(defIdx(rowVar + kFirstLoopVar, fmt::format("qo{}", r), row));
    extents_[rowVar + kFirstLoopVar] = Lq;
    const Idx rowAt = idxVar(rowVar + kFirstLoopVar, fmt::format("qo{}", r));
    for (const Element& e : x.outputs) {
      if (e.row != r) continue;
      Block one;
      int colVar = freshLoopVar();
      one.push_back(defIdx(colVar + kFirstLoopVar, e.name, e.col));
      extents_[colVar + kFirstLoopVar] = E;
      const Idx colAt = idxVar(colVar + kFirstLoopVar, e.name);
      one.push_back(assign(e.reg, fapply(Fn::Mul, {fvar(e.reg), fvar(l[r])})));
      accs_ = {e.reg};
      Cse cse;
      loop::ExprP result = atAxis(atAxis(storedResult(), query.var, idxVar(rowVar, fmt::format("qo{}", r))), width.var, idxVar(colVar, e.name));
      FE value = lower(result, one, cse);
      if (staged) one.push_back(storeShared(x.vRing, simplify(rowLocal[r] * idxConst(sl.widthStride) + colAt, extents_), value));
      else one.push_back(storeGlobal(0, outputAt(rowAt, colAt), value));
      if (e.chunk) store.push_back(ifLess(e.chunk, idxConst(valueChunks), std::move(one)));
      else store.insert(store.end(), one.begin(), one.end());
    }
    // (a block taking fewer rows than it holds stores only those: the others computed on the next rows' q)
    if (x.rowsTaken < x.queryBlock) finish.push_back(ifLess(rowLocal[r], idxConst(x.rowsTaken), std::move(store)));
    else finish.push_back(ifLess(row, idxConst(Lq), std::move(store)));
  }
  if (!staged) return;
  // thread ct moves 16-byte chunks ct, ct + threads, .. of the block's rows (row c / (E / 8), columns 8 (c mod E / 8) ..)
  finish.push_back(barrier());
  const int64_t per = E / 8, chunks = x.queryBlock * per, threads = k_.block[0];
  std::vector<int> vals;
  for (int i = 0; i < 8; ++i) vals.push_back(slot(fmt::format("ov{}", i)));
  std::vector<FE> values;
  for (int v : vals) values.push_back(fvar(v));
  for (int64_t first = 0; first < chunks; first += threads) {
    const Idx c = simplify(threadIdx() + idxConst(first), extents_);
    const Idx r = simplify(floorDiv(c, per), extents_), col = simplify(mod(c, per) * idxConst(8), extents_);
    const Idx row = simplify(q0 + r, extents_);
    const int rowVar = freshLoopVar();
    extents_[rowVar + kFirstLoopVar] = Lq;
    const Idx rowAt = idxVar(rowVar + kFirstLoopVar, fmt::format("qc{}", first / threads));
    Block move{loadSharedVector(x.vRing, simplify(r * idxConst(sl.widthStride) + col, extents_), vals),
               kernel::storeVector(0, outputAt(rowAt, col), values)};
    move = Block{defIdx(rowVar + kFirstLoopVar, fmt::format("qc{}", first / threads), row), ifLess(rowAt, idxConst(Lq), std::move(move))};
    if (chunks - first < threads) move = Block{ifLess(c, idxConst(chunks), std::move(move))};
    finish.insert(finish.end(), move.begin(), move.end());
  }
}

}  // namespace kiln::kernel::detail
