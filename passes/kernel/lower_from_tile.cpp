// kernel-lower-from-tile: makes each schedule concrete.
//   thread_per_output: i = blockIdx.x*block + threadIdx.x; if (i < points) { parallel indices from i;
//                      serial reduction loop; store }
//   block_per_row:     row indices from blockIdx.x; for each stage, threads stride over the flattened
//                      reduction and partial results meet in shared memory `red` through a halving tree with
//                      a barrier after every step (barriers outside any thread-dependent branch); then
//                      threads stride over the row's outputs.
// Loop-IR variable v becomes Kernel-IR variable v + kFirstLoopVar; loads become flat row-major indices.
// Common subexpressions are computed once per scope.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>

#include "kiln/kernel/lower.h"
#include "kiln/tile/contraction.h"
#include "kiln/tile/reuse_key.h"
#include "kiln/support/error.h"

namespace kiln::kernel {
namespace {

constexpr int kLinearVar = 2;     // the flat output (or reduction) position
constexpr int kFirstLoopVar = 3;  // Loop-IR variables are shifted past the reserved ones

Idx rowMajor(const std::vector<Idx>& index, const Shape& shape, const VarExtents& ext) {
  Idx flat = idxConst(0);
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    flat = flat + index[d] * idxConst(stride);
    stride *= shape[d];
  }
  return simplify(flat, ext);
}

class KernelBuilder {
 public:
  KernelBuilder(const tile::Program& tp, const loop::Kernel& lk, const tile::Schedule& s) : tp_(tp), lk_(lk), s_(s) {}

  Kernel build() {
    k_.name = lk_.name;
    k_.origins = lk_.origins;
    param(lk_.output, true);
    if (s_.strategy == tile::Strategy::ThreadPerOutput) threadPerOutput();
    else if (s_.strategy == tile::Strategy::BlockPerRow) blockPerRow();
    else tiledContraction();
    return std::move(k_);
  }

 private:
  int param(int buffer, bool written) {
    for (size_t i = 0; i < k_.params.size(); ++i)
      if (k_.params[i].buffer == buffer) return static_cast<int>(i);
    const loop::Buffer& b = tp_.loop.buffers[buffer];
    k_.params.push_back(Param{buffer, b.name, b.dtype, numel(b.shape), written});
    return static_cast<int>(k_.params.size()) - 1;
  }

  int slot(const std::string& name) {
    k_.floatVars.push_back(name);
    return static_cast<int>(k_.floatVars.size()) - 1;
  }

  Idx var(const loop::Axis& a) { return idxVar(a.var + kFirstLoopVar, a.name); }
  // A Loop-IR index in Kernel-IR terms: variables shifted, index reads addressed through parameters.
  Idx shifted(const Idx& e) {
    Idx s = substitute(e, [&](int v, const std::string& n) { return idxVar(v + kFirstLoopVar, n); });
    return mapIndexLoads(s, [&](const IndexNode& l, const Idx& flat) {
      int prm = param(l.buffer, false);
      return idxLoad(prm, k_.params[prm].name, flat);
    });
  }

  // Defines each axis from a flat position in row-major order over the axes.
  void unflatten(const std::vector<loop::Axis>& axes, const Idx& flat, int64_t flatExtent, Block& out) {
    int64_t stride = 1;
    std::vector<Idx> defs(axes.size());
    for (size_t d = axes.size(); d-- > 0;) {
      defs[d] = simplify(mod(floorDiv(flat, stride), axes[d].extent), extents_);
      stride *= axes[d].extent;
    }
    for (size_t d = 0; d < axes.size(); ++d) {
      out.push_back(defIdx(axes[d].var + kFirstLoopVar, axes[d].name, defs[d]));
      extents_[axes[d].var + kFirstLoopVar] = axes[d].extent;
    }
  }

  FE lower(const loop::ExprP& e, Block& out, std::map<std::string, FE>& cse) {
    if (e->kind == loop::Expr::Kind::Imm) return fconst(e->imm);
    if (e->kind == loop::Expr::Kind::Acc) return fvar(accs_.at(e->stage));
    std::string key = loop::exprKey(e);
    if (auto it = cse.find(key); it != cse.end()) return it->second;
    FE value;
    if (e->kind == loop::Expr::Kind::Select) {
      FE a = lower(e->args[0], out, cse), b = lower(e->args[1], out, cse);
      value = fselect(simplify(shifted(e->index[0]), extents_), simplify(shifted(e->index[1]), extents_), a, b);
    } else if (e->kind == loop::Expr::Kind::Load) {
      std::vector<Idx> idx;
      for (auto& i : e->index) idx.push_back(shifted(i));
      value = loadGlobal(param(e->buffer, false), rowMajor(idx, tp_.loop.buffers[e->buffer].shape, extents_));
    } else {
      std::vector<FE> args;
      for (auto& a : e->args) args.push_back(lower(a, out, cse));
      value = fapply(e->fn, std::move(args), e->castTo);
    }
    int s = slot(fmt::format("v{}", k_.floatVars.size()));
    out.push_back(assign(s, value));
    cse[key] = fvar(s);
    return cse[key];
  }

  Idx outputIndex() {
    std::vector<Idx> idx;
    for (auto& a : lk_.parallel) idx.push_back(var(a));
    return rowMajor(idx, tp_.loop.buffers[lk_.output].shape, extents_);
  }

  void storeResult(Block& out, std::map<std::string, FE> cse = {}) {
    FE r = lower(lk_.result, out, cse);
    out.push_back(storeGlobal(0, outputIndex(), r));
  }

  // Whether e has the same value for every output of a row: it reads the stages' totals and memory at
  // row-axis indices only (RMSNorm's rsqrt(mean + eps), softmax's 1/sum).
  bool rowInvariant(const loop::ExprP& e) const {
    bool invariant = true;
    auto check = [&](const Idx& i) {
      forEachVar(i, [&](int v) {
        for (size_t d = lk_.rowAxes; d < lk_.parallel.size(); ++d) invariant = invariant && lk_.parallel[d].var != v;
      });
    };
    std::function<void(const loop::ExprP&)> visit = [&](const loop::ExprP& x) {
      for (auto& i : x->index) check(i);
      for (auto& a : x->args) visit(a);
    };
    visit(e);
    return invariant;
  }

  // Computes the row-invariant parts of the result once per row, before the row's write loop.
  void hoistRowInvariants(const loop::ExprP& e, Block& out, std::map<std::string, FE>& cse) {
    bool worthIt = e->kind == loop::Expr::Kind::Apply || e->kind == loop::Expr::Kind::Load || e->kind == loop::Expr::Kind::Select;
    if (worthIt && rowInvariant(e)) {
      lower(e, out, cse);
      return;
    }
    for (auto& a : e->args) hoistRowInvariants(a, out, cse);
  }

  // acc_s = combine(acc_s, value_s) in `body` (the loop body over stage s's reduction axes).
  void accumulate(size_t stage, Block& body) {
    std::map<std::string, FE> cse;
    const loop::Reduction& r = lk_.stages[stage];
    FE v = lower(r.value, body, cse);
    Fn combine = r.fn == loop::ReduceFn::Sum ? Fn::Add : Fn::Max;
    body.push_back(assign(accs_[stage], fapply(combine, {fvar(accs_[stage]), v})));
  }

  void makeAccumulators() {
    for (size_t s = 0; s < lk_.stages.size(); ++s) accs_.push_back(slot(fmt::format("acc{}", s)));
  }

  void threadPerOutput() {
    int64_t points = lk_.parallelPoints(), block = s_.knob("block");
    k_.block = {block, 1, 1};
    k_.grid = {(points + block - 1) / block, 1, 1};
    extents_[kThreadIdx] = block;
    extents_[kBlockIdx] = k_.grid[0];
    Idx linear = idxVar(kLinearVar, "i");
    k_.body.push_back(defIdx(kLinearVar, "i", blockIdx() * idxConst(block) + threadIdx()));
    extents_[kLinearVar] = points;
    Block guarded;
    unflatten(lk_.parallel, linear, points, guarded);
    makeAccumulators();
    for (size_t st = 0; st < lk_.stages.size(); ++st) {
      // Each thread runs every stage for its own output serially: one loop per reduction axis.
      const loop::Reduction& r = lk_.stages[st];
      guarded.push_back(assign(accs_[st], fconst(tensor::reduceInit(r.fn))));
      Block body;
      accumulate(st, body);
      for (size_t d = r.axes.size(); d-- > 0;) {
        const loop::Axis& a = r.axes[d];
        body = Block{forLoop(a.var + kFirstLoopVar, a.name, idxConst(0), idxConst(a.extent), 1, std::move(body))};
      }
      for (auto& st2 : body) guarded.push_back(std::move(st2));
    }
    storeResult(guarded);
    k_.body.push_back(ifLess(linear, idxConst(points), std::move(guarded)));
  }

  // One block per row. Each stage: threads stride over the flattened reduction, partial results meet in
  // shared memory through a halving tree, and every thread reads the total. Then threads stride over the
  // row's output points.
  void blockPerRow() {
    int64_t rows = lk_.rowPoints(), threads = s_.knob("threads");
    int64_t perRow = lk_.parallelPoints() / rows;
    k_.block = {threads, 1, 1};
    k_.grid = {rows, 1, 1};
    extents_[kThreadIdx] = threads;
    extents_[kBlockIdx] = rows;
    std::vector<loop::Axis> rowAxes(lk_.parallel.begin(), lk_.parallel.begin() + lk_.rowAxes);
    std::vector<loop::Axis> inner(lk_.parallel.begin() + lk_.rowAxes, lk_.parallel.end());
    unflatten(rowAxes, blockIdx(), rows, k_.body);
    makeAccumulators();
    if (!lk_.stages.empty()) k_.shared.push_back(SharedBuffer{"red", threads});
    for (size_t st = 0; st < lk_.stages.size(); ++st) {
      const loop::Reduction& r = lk_.stages[st];
      int64_t extent = 1;
      for (auto& a : r.axes) extent *= a.extent;
      int acc = accs_[st];
      k_.body.push_back(assign(acc, fconst(tensor::reduceInit(r.fn))));
      Block body;
      extents_[kLinearVar] = extent;
      unflatten(r.axes, idxVar(kLinearVar, "j"), extent, body);
      accumulate(st, body);
      k_.body.push_back(forLoop(kLinearVar, "j", threadIdx(), idxConst(extent), threads, std::move(body)));
      k_.body.push_back(storeShared(0, threadIdx(), fvar(acc)));
      k_.body.push_back(barrier());
      Fn combine = r.fn == loop::ReduceFn::Sum ? Fn::Add : Fn::Max;
      for (int64_t half = threads / 2; half >= 1; half /= 2) {
        Block step{storeShared(0, threadIdx(), fapply(combine, {loadShared(0, threadIdx()), loadShared(0, threadIdx() + idxConst(half))}))};
        k_.body.push_back(ifLess(threadIdx(), idxConst(half), std::move(step)));
        k_.body.push_back(barrier());
      }
      k_.body.push_back(assign(acc, loadShared(0, idxConst(0))));
      k_.body.push_back(barrier());  // everyone has read the total before the next stage reuses `red`
    }
    std::map<std::string, FE> rowValues;
    hoistRowInvariants(lk_.result, k_.body, rowValues);
    Block write;
    extents_[kLinearVar] = perRow;
    unflatten(inner, idxVar(kLinearVar, "c"), perRow, write);
    storeResult(write, rowValues);
    k_.body.push_back(forLoop(kLinearVar, "c", threadIdx(), idxConst(perRow), threads, std::move(write)));
  }

  // A block per output tile of a matrix product (tile/contraction.h). Block b: tile column tn = b mod tilesN,
  // tile row tm = (b div tilesN) mod tilesM, the other output axes from b div (tilesM*tilesN). Per step of tile_k,
  // every operand slice is copied into shared memory (layouts at sliceSlot; zeros outside the matrix), a barrier,
  // the block multiplies, a barrier; with knob prefetch the copy goes through registers loaded a step ahead.
  // The multiplication and the epilogue are per thread on CUDA cores (multiplyOnCudaCores) or per warp on
  // tensor cores (multiplyOnTensorCores, knobs mma_bf16 / mma_f16, and mma_pairs).
  void tiledContraction() {
    auto c = tile::findContraction(lk_, static_cast<int>(s_.knob("m_axis")), static_cast<int>(s_.knob("n_axis")));
    KILN_ASSERT(c.has_value(), "kernel {}: tiled_contraction on a kernel that is not a contraction", lk_.name);
    Tiling t;
    t.c = *c;
    t.tm = s_.knob("tile_m");
    t.tn = s_.knob("tile_n");
    t.tk = s_.knob("tile_k");
    const bool mma = s_.knobs.count("mma_bf16") || s_.knobs.count("mma_f16");
    t.pairs = s_.knobs.count("mma_pairs") > 0;
    KILN_ASSERT(!t.pairs || mma, "kernel {}: mma_pairs without tensor cores", lk_.name);
    const DType sliceType = !t.pairs ? DType::F32 : s_.knobs.count("mma_bf16") ? DType::BF16 : DType::F16;
    const int64_t threads = mma ? 128 : (t.tn / s_.knob("micro_n")) * (t.tm / s_.knob("micro_m"));
    const int64_t tilesM = (t.c.m + t.tm - 1) / t.tm, tilesN = (t.c.n + t.tn - 1) / t.tn;
    t.mAxis = lk_.parallel[static_cast<size_t>(t.c.mAxis)];
    t.nAxis = lk_.parallel[static_cast<size_t>(t.c.nAxis)];
    k_.block = {threads, 1, 1};
    k_.grid = {t.c.outerPoints * tilesM * tilesN, 1, 1};
    extents_[kThreadIdx] = threads;
    extents_[kBlockIdx] = k_.grid[0];
    next_ = kFirstLoopVar + lk_.maxVar() + 1;
    t.tileN = defVar(k_.body, "tn", mod(blockIdx(), tilesN), tilesN);
    t.tileM = defVar(k_.body, "tm", mod(floorDiv(blockIdx(), tilesN), tilesM), tilesM);
    std::vector<loop::Axis> outer;
    for (size_t d = 0; d < lk_.parallel.size(); ++d)
      if (static_cast<int>(d) != t.c.mAxis && static_cast<int>(d) != t.c.nAxis) outer.push_back(lk_.parallel[d]);
    unflatten(outer, floorDiv(blockIdx(), tilesM * tilesN), t.c.outerPoints, k_.body);
    for (size_t st = 0; st < lk_.stages.size(); ++st) {
      t.sharedA.push_back(static_cast<int>(k_.shared.size()));
      k_.shared.push_back(SharedBuffer{fmt::format("a{}", st), sliceElements(t, t.tm), sliceType});
      t.sharedB.push_back(static_cast<int>(k_.shared.size()));
      k_.shared.push_back(SharedBuffer{fmt::format("b{}", st), sliceElements(t, t.tn), sliceType});
    }
    // Thread coordinates and accumulators (zeroed) come first; the reduction loop then stages and multiplies.
    Block steps;
    int kStepVar = next_++;
    t.k0 = idxVar(kStepVar, "k0");
    extents_[kStepVar] = t.c.k;
    std::function<void(Block&)> multiply = mma ? multiplyOnTensorCores(t) : multiplyOnCudaCores(t);
    std::vector<OperandSlice> operands;  // per stage, A then B
    for (size_t st = 0; st < lk_.stages.size(); ++st) {
      const loop::Axis& kAxis = lk_.stages[st].axes[0];
      operands.push_back({t.c.stages[st].a, t.mAxis, kAxis, t.c.m, t.tm, t.tileM, t.sharedA[st]});
      operands.push_back({t.c.stages[st].b, t.nAxis, kAxis, t.c.n, t.tn, t.tileN, t.sharedB[st]});
    }
    if (s_.knobs.count("prefetch")) {
      // Registers hold the next slice while the block multiplies this one: store, barrier, load the next slice
      // (in flight during the multiplication), multiply, barrier. The first slice is loaded before the loop.
      std::vector<Prefetched> prefetch;
      for (const OperandSlice& o : operands) prefetch.push_back(prefetched(t, o));
      for (const Prefetched& o : prefetch) loadSlice(t, o, idxConst(0), k_.body);
      for (const Prefetched& o : prefetch) storeSlice(t, o, steps);
      steps.push_back(barrier());
      for (const Prefetched& o : prefetch) loadSlice(t, o, simplify(t.k0 + idxConst(t.tk), extents_), steps);
    } else {
      for (const OperandSlice& o : operands) stageOperand(t, o, steps);
      steps.push_back(barrier());
    }
    multiply(steps);
    steps.push_back(barrier());  // everyone is done with the slices before the next step overwrites them
    k_.body.push_back(forLoop(kStepVar, "k0", idxConst(0), idxConst(t.c.k), t.tk, std::move(steps)));
    // The epilogue, once per owned output: m and n defined, each stage's total in its accumulator.
    accs_.assign(lk_.stages.size(), -1);
    extents_[t.mAxis.var + kFirstLoopVar] = t.c.m;
    extents_[t.nAxis.var + kFirstLoopVar] = t.c.n;
    for (const Owned& o : t.owned) {
      Block store;
      store.push_back(defIdx(t.mAxis.var + kFirstLoopVar, t.mAxis.name, o.row));
      store.push_back(defIdx(t.nAxis.var + kFirstLoopVar, t.nAxis.name, o.col));
      for (size_t st = 0; st < lk_.stages.size(); ++st) accs_[st] = o.acc[st];
      storeResult(store);
      k_.body.push_back(ifLess(o.row, idxConst(t.c.m), Block{ifLess(o.col, idxConst(t.c.n), std::move(store))}));
    }
  }

  struct Owned {         // one output a thread holds: its row and column in the matrix, its accumulator per stage
    Idx row, col;
    std::vector<int> acc;
  };
  struct Tiling {
    tile::Contraction c;
    int64_t tm = 0, tn = 0, tk = 0;
    bool pairs = false;  // knob mma_pairs: slices in the operand type, [row][k], read by mma as 32-bit pairs
    loop::Axis mAxis, nAxis;
    Idx tileM, tileN, k0;
    std::vector<int> sharedA, sharedB;
    std::vector<Owned> owned;
  };

  int next_ = 0;  // next free index variable id of the tiled schedule

  Idx defVar(Block& out, const std::string& name, Idx value, int64_t extent) {
    int id = next_++;
    out.push_back(defIdx(id, name, simplify(value, extents_)));
    extents_[id] = extent;
    return idxVar(id, name);
  }

  // Shared slices of an operand: [k][row] f32 with rows padded by one (k-neighbours of a copy fall in other banks;
  // threads reading one k broadcast), or with mma_pairs [row][k] in the operand type, k padded by kPairPad so that
  // the 8 rows of a fragment's pairs fall in different banks and every pair stays 4-byte aligned.
  static constexpr int64_t kPairPad = 8;
  int64_t sliceElements(const Tiling& t, int64_t rows) const {
    return t.pairs ? rows * (t.tk + kPairPad) : t.tk * (rows + 1);
  }
  Idx sliceSlot(const Tiling& t, const Idx& kk, const Idx& rr, int64_t rows) {
    return simplify(t.pairs ? rr * idxConst(t.tk + kPairPad) + kk : kk * idxConst(rows + 1) + rr, extents_);
  }

  // One operand of a stage: `value` at rows [tile * rows, + rows) of `rowAxis` (extent rowExtent) and k along
  // `kAxis`, staged slice by slice into shared buffer `buf`.
  struct OperandSlice {
    loop::ExprP value;
    loop::Axis rowAxis, kAxis;
    int64_t rowExtent = 0, rows = 0;
    Idx tileIdx;
    int buf = 0;
  };

  // The operand's value at slice row rr and k = kStart + kk, handed to `sink` (a store or an assignment) under the
  // guards row < rowExtent and k < K: nothing is read outside the matrix.
  Stmt guardedOperandLoad(const Tiling& t, const OperandSlice& o, const Idx& rr, const Idx& kk, const Idx& kStart,
                          const std::function<Stmt(FE)>& sink) {
    Block inside;
    Idx row = simplify(o.tileIdx * idxConst(o.rows) + rr, extents_), kAt = simplify(kStart + kk, extents_);
    inside.push_back(defIdx(o.rowAxis.var + kFirstLoopVar, o.rowAxis.name, row));
    extents_[o.rowAxis.var + kFirstLoopVar] = o.rowExtent;
    inside.push_back(defIdx(o.kAxis.var + kFirstLoopVar, o.kAxis.name, kAt));
    extents_[o.kAxis.var + kFirstLoopVar] = t.c.k;
    std::map<std::string, FE> cse;
    FE v = lower(o.value, inside, cse);
    inside.push_back(sink(v));
    return ifLess(row, idxConst(o.rowExtent), Block{ifLess(kAt, idxConst(t.c.k), std::move(inside))});
  }

  // Copies the operand's slice at k in [k0, k0 + tk) into its shared buffer (zeros outside the matrix).
  void stageOperand(const Tiling& t, const OperandSlice& o, Block& out) {
    const int64_t threads = k_.block[0];
    int flatVar = next_++;
    Idx flat = idxVar(flatVar, "e");
    extents_[flatVar] = o.rows * t.tk;
    Block body;
    Idx kk = defVar(body, "kk", mod(flat, t.tk), t.tk);
    Idx rr = defVar(body, "rr", floorDiv(flat, t.tk), o.rows);
    Idx slotIdx = sliceSlot(t, kk, rr, o.rows);
    body.push_back(storeShared(o.buf, slotIdx, fconst(0.f)));
    body.push_back(guardedOperandLoad(t, o, rr, kk, t.k0, [&](FE v) { return storeShared(o.buf, slotIdx, v); }));
    out.push_back(forLoop(flatVar, "e", threadIdx(), idxConst(o.rows * t.tk), threads, std::move(body)));
  }

  // One operand slice staged through registers (knob prefetch): thread t holds elements e = t + i * threads of the
  // rows x tile_k slice, element e being k offset e mod tile_k of row e div tile_k (as stageOperand copies them).
  struct Prefetched {
    OperandSlice operand;
    struct Element {
      Idx kk, rr;
      int reg = 0;
    };
    std::vector<Element> elements;
    bool partial = false;  // the last elements of some threads lie past the slice (guarded by rr < rows)
  };

  Prefetched prefetched(const Tiling& t, const OperandSlice& operand) {
    const int64_t threads = k_.block[0], total = operand.rows * t.tk;
    Prefetched o{operand, {}, total % threads != 0};
    for (int64_t i = 0; i * threads < total; ++i) {
      Idx flat = simplify(threadIdx() + idxConst(i * threads), extents_);
      Idx kk = defVar(k_.body, fmt::format("pk{}_{}", operand.buf, i), mod(flat, t.tk), t.tk);
      Idx rr = defVar(k_.body, fmt::format("pr{}_{}", operand.buf, i), floorDiv(flat, t.tk), ((i + 1) * threads - 1) / t.tk + 1);
      o.elements.push_back({kk, rr, slot(fmt::format("p{}_{}", operand.buf, i))});
    }
    return o;
  }

  // e < rows * tile_k, said as rr < rows (kk < tile_k always): a variable bound the verifier can narrow on.
  Stmt insideSlice(const Prefetched& o, const Prefetched::Element& el, Stmt s) {
    return o.partial ? ifLess(el.rr, idxConst(o.operand.rows), Block{std::move(s)}) : s;
  }

  // Loads the slice starting at k = kStart into the registers (zeros outside the matrix and past k).
  void loadSlice(const Tiling& t, const Prefetched& o, const Idx& kStart, Block& out) {
    for (const auto& el : o.elements) {
      out.push_back(assign(el.reg, fconst(0.f)));
      out.push_back(insideSlice(o, el, guardedOperandLoad(t, o.operand, el.rr, el.kk, kStart,
                                                          [&](FE v) { return assign(el.reg, v); })));
    }
  }

  // Writes the registers into the shared slice (sliceSlot's layout, as stageOperand).
  void storeSlice(const Tiling& t, const Prefetched& o, Block& out) {
    for (const auto& el : o.elements)
      out.push_back(insideSlice(o, el, storeShared(o.operand.buf, sliceSlot(t, el.kk, el.rr, o.operand.rows), fvar(el.reg))));
  }

  // CUDA cores: thread (tx, ty) = (t mod TX, t div TX) owns rows ty + i*TY and columns tx + j*TX of the tile (TY x TX
  // threads, micro_m x micro_n outputs each), so neighbouring threads touch neighbouring columns.
  std::function<void(Block&)> multiplyOnCudaCores(Tiling& t) {
    const int64_t um = s_.knob("micro_m"), un = s_.knob("micro_n"), gx = t.tn / un, gy = t.tm / um;
    Idx tx = defVar(k_.body, "tx", mod(threadIdx(), gx), gx);
    Idx ty = defVar(k_.body, "ty", floorDiv(threadIdx(), gx), gy);
    std::vector<std::vector<int>> acc(lk_.stages.size());
    for (size_t st = 0; st < lk_.stages.size(); ++st)
      for (int64_t i = 0; i < um; ++i)
        for (int64_t j = 0; j < un; ++j) {
          acc[st].push_back(slot(fmt::format("acc{}_{}_{}", st, i, j)));
          k_.body.push_back(assign(acc[st].back(), fconst(0.f)));
        }
    for (int64_t i = 0; i < um; ++i)
      for (int64_t j = 0; j < un; ++j) {
        Owned o{simplify(t.tileM * idxConst(t.tm) + ty + idxConst(i * gy), extents_),
                simplify(t.tileN * idxConst(t.tn) + tx + idxConst(j * gx), extents_), {}};
        for (size_t st = 0; st < lk_.stages.size(); ++st) o.acc.push_back(acc[st][static_cast<size_t>(i * un + j)]);
        t.owned.push_back(std::move(o));
      }
    return [this, &t, um, un, gx, gy, tx, ty, acc](Block& steps) {
      int kkVar = next_++;
      Idx kk = idxVar(kkVar, "kk");
      extents_[kkVar] = t.tk;
      Block inner;
      for (size_t st = 0; st < lk_.stages.size(); ++st) {
        std::vector<FE> a, b;
        for (int64_t i = 0; i < um; ++i) {
          int sl = slot(fmt::format("a{}_{}", st, i));
          inner.push_back(assign(sl, loadShared(t.sharedA[st], simplify(kk * idxConst(t.tm + 1) + ty + idxConst(i * gy), extents_))));
          a.push_back(fvar(sl));
        }
        for (int64_t j = 0; j < un; ++j) {
          int sl = slot(fmt::format("b{}_{}", st, j));
          inner.push_back(assign(sl, loadShared(t.sharedB[st], simplify(kk * idxConst(t.tn + 1) + tx + idxConst(j * gx), extents_))));
          b.push_back(fvar(sl));
        }
        for (int64_t i = 0; i < um; ++i)
          for (int64_t j = 0; j < un; ++j) {
            int s = acc[st][static_cast<size_t>(i * un + j)];
            inner.push_back(assign(s, fapply(Fn::Add, {fvar(s), fapply(Fn::Mul, {a[static_cast<size_t>(i)], b[static_cast<size_t>(j)]})})));
          }
      }
      steps.push_back(forLoop(kkVar, "kk", idxConst(0), idxConst(t.tk), 1, std::move(inner)));
    };
  }

  // Tensor cores: 4 warps in a 2 x 2 grid, each owning a (tile_m/2) x (tile_n/2) quarter of the tile as
  // (tile_m/32) x (tile_n/16) mma tiles of 16 x 8. Per 16 of k, a warp reads its A fragments (16 x 16 per mma row)
  // and B fragments (16 x 8 per mma column) from shared memory in the lane layout of kernel::mma and issues one
  // mma per (row, column) pair, tile_k / 16 times per staged slice; lane (g, t) owns the outputs of its C fragments.
  std::function<void(Block&)> multiplyOnTensorCores(Tiling& t) {
    const DType type = s_.knobs.count("mma_bf16") ? DType::BF16 : DType::F16;
    const int64_t wm = t.tm / 2, wn = t.tn / 2, mi = wm / kMmaM, ni = wn / kMmaN;
    Idx warp = defVar(k_.body, "warp", floorDiv(threadIdx(), 32), 4);
    Idx lane = defVar(k_.body, "lane", mod(threadIdx(), 32), 32);
    Idx g = defVar(k_.body, "g", floorDiv(lane, 4), 8);
    Idx q = defVar(k_.body, "t", mod(lane, 4), 4);
    Idx warpRow = defVar(k_.body, "wr", floorDiv(warp, 2), 2);
    Idx warpCol = defVar(k_.body, "wc", mod(warp, 2), 2);
    // acc[stage][(i*ni + j)*4 + e]: element e of the C fragment of mma tile (i, j).
    std::vector<std::vector<int>> acc(lk_.stages.size());
    for (size_t st = 0; st < lk_.stages.size(); ++st)
      for (int64_t i = 0; i < mi; ++i)
        for (int64_t j = 0; j < ni; ++j)
          for (int e = 0; e < 4; ++e) {
            acc[st].push_back(slot(fmt::format("c{}_{}_{}_{}", st, i, j, e)));
            k_.body.push_back(assign(acc[st].back(), fconst(0.f)));
          }
    // The fragment layouts of kernel::mma (mmaElementA/B/C) are lane 0's element offsets plus (g, 2t) for A and C,
    // (2t, g) for B, with g = lane / 4 and t = lane % 4.
    for (int64_t i = 0; i < mi; ++i)
      for (int64_t j = 0; j < ni; ++j)
        for (int e = 0; e < 4; ++e) {
          auto [dr, dc] = mmaElementC(0, e);
          Idx row = t.tileM * idxConst(t.tm) + warpRow * idxConst(wm) + idxConst(i * kMmaM + dr) + g;
          Idx col = t.tileN * idxConst(t.tn) + warpCol * idxConst(wn) + idxConst(j * kMmaN + dc) + q * idxConst(2);
          Owned o{simplify(row, extents_), simplify(col, extents_), {}};
          for (size_t st = 0; st < lk_.stages.size(); ++st) o.acc.push_back(acc[st][static_cast<size_t>((i * ni + j) * 4 + e)]);
          t.owned.push_back(std::move(o));
        }
    KILN_ASSERT(t.tk % kMmaK == 0, "kernel {}: tensor-core tiles take tile_k a multiple of {}, not {}", lk_.name, kMmaK, t.tk);
    return [this, &t, type, wm, wn, mi, ni, g, q, warpRow, warpCol, acc](Block& inner) {
      for (size_t st = 0; st < lk_.stages.size(); ++st) {
        // Fragment registers (without mma_pairs), reused by every k-step of the staged slice.
        std::vector<std::vector<int>> a(static_cast<size_t>(mi)), b(static_cast<size_t>(ni));
        if (!t.pairs) {
          for (int64_t i = 0; i < mi; ++i)
            for (int e = 0; e < 8; ++e) a[static_cast<size_t>(i)].push_back(slot(fmt::format("fa{}_{}_{}", st, i, e)));
          for (int64_t j = 0; j < ni; ++j)
            for (int e = 0; e < 4; ++e) b[static_cast<size_t>(j)].push_back(slot(fmt::format("fb{}_{}_{}", st, j, e)));
        }
        for (int64_t step = 0; step < t.tk / kMmaK; ++step) {  // one mma k-step per 16 of the staged slice
          const Idx kk = idxConst(step * kMmaK);
          // Where fragment element e of the warp's mma row i (column j) lies in the slice: A[row][k] at slice row
          // warp row offset + 16 i + row; B[k][n] at slice row warp column offset + 8 j + n (sliceSlot's layout).
          auto atA = [&](int64_t i, int e) {
            auto [dr, dc] = mmaElementA(0, e);
            return sliceSlot(t, kk + idxConst(dc) + q * idxConst(2), warpRow * idxConst(wm) + idxConst(i * kMmaM + dr) + g, t.tm);
          };
          auto atB = [&](int64_t j, int e) {
            auto [dk, dn] = mmaElementB(0, e);
            return sliceSlot(t, kk + idxConst(dk) + q * idxConst(2), warpCol * idxConst(wn) + idxConst(j * kMmaN + dn) + g, t.tn);
          };
          if (!t.pairs) {
            for (int64_t i = 0; i < mi; ++i)
              for (int e = 0; e < 8; ++e)
                inner.push_back(assign(a[static_cast<size_t>(i)][static_cast<size_t>(e)], loadShared(t.sharedA[st], atA(i, e))));
            for (int64_t j = 0; j < ni; ++j)
              for (int e = 0; e < 4; ++e)
                inner.push_back(assign(b[static_cast<size_t>(j)][static_cast<size_t>(e)], loadShared(t.sharedB[st], atB(j, e))));
          }
          for (int64_t i = 0; i < mi; ++i)
            for (int64_t j = 0; j < ni; ++j) {
              std::vector<int> c(acc[st].begin() + (i * ni + j) * 4, acc[st].begin() + (i * ni + j) * 4 + 4);
              if (!t.pairs) {
                inner.push_back(mma(type, a[static_cast<size_t>(i)], b[static_cast<size_t>(j)], c));
                continue;
              }
              // Straight from the [row][k] slices: pair p is fragment elements 2p and 2p+1 (k and k+1).
              std::vector<Idx> aPairs, bPairs;
              for (int e = 0; e < 8; e += 2) aPairs.push_back(atA(i, e));
              for (int e = 0; e < 4; e += 2) bPairs.push_back(atB(j, e));
              inner.push_back(mmaFromShared(type, t.sharedA[st], std::move(aPairs), t.sharedB[st], std::move(bPairs), c));
            }
        }
      }
    };
  }

  const tile::Program& tp_;
  const loop::Kernel& lk_;
  const tile::Schedule& s_;
  Kernel k_;
  std::vector<int> accs_;
  VarExtents extents_;
};

}  // namespace

Program lowerFromTile(const tile::Program& tp, const LowerOptions& options, LowerStats* stats) {
  Program p;
  p.modelName = tp.loop.modelName;
  p.buffers = tp.loop.buffers;
  p.inputs = tp.loop.inputs;
  p.outputs = tp.loop.outputs;
  struct Lowered {
    size_t kernel;             // index into p.kernels
    std::vector<int> buffers;  // its buffers in canonical order
  };
  std::map<std::string, Lowered> lowered;
  LowerStats counts;
  for (size_t i = 0; i < tp.loop.kernels.size(); ++i) {
    const loop::Kernel& lk = tp.loop.kernels[i];
    std::vector<int> buffers;
    std::string key = options.reuseIdenticalKernels ? tile::reuseKey(tp, i, buffers) : "";
    auto it = key.empty() ? lowered.end() : lowered.find(key);
    if (it == lowered.end()) {
      p.kernels.push_back(KernelBuilder(tp, lk, tp.schedules[i]).build());
      if (!key.empty()) lowered.emplace(std::move(key), Lowered{p.kernels.size() - 1, std::move(buffers)});
      ++counts.lowered;
      continue;
    }
    Kernel k = p.kernels[it->second.kernel];
    k.name = lk.name;
    k.origins = lk.origins;
    const std::vector<int>& first = it->second.buffers;
    for (Param& param : k.params) {
      auto pos = std::find(first.begin(), first.end(), param.buffer) - first.begin();
      param.buffer = buffers.at(static_cast<size_t>(pos));
      param.name = p.buffers[param.buffer].name;
    }
    p.kernels.push_back(std::move(k));
    ++counts.reused;
  }
  if (stats) *stats = counts;
  return p;
}

}  // namespace kiln::kernel
