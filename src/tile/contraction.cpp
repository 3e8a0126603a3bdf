#include "kiln/tile/contraction.h"

#include <functional>
#include <set>

#include "kiln/tile/ir.h"

namespace kiln::tile {
namespace {

std::set<int> varsOf(const loop::ExprP& e) {
  std::set<int> vars;
  std::function<void(const loop::ExprP&)> visit = [&](const loop::ExprP& x) {
    for (auto& i : x->index) forEachVar(i, [&](int v) { vars.insert(v); });
    for (auto& a : x->args) visit(a);
  };
  visit(e);
  return vars;
}

// The row-major flat element index of `load` (a load of a buffer of `shape`) with each index variable v replaced by
// value(v) (null: kept), simplified over `ext`.
Idx flatIndexWith(const loop::Expr& load, const Shape& shape, const std::function<Idx(int)>& value, const VarExtents& ext) {
  Idx flat = idxConst(0);
  int64_t stride = 1;
  for (size_t d = load.index.size(); d-- > 0;) {
    flat = flat + idxMul(substitute(load.index[d], [&](int v, const std::string&) { return value(v); }), stride);
    stride *= shape[d];
  }
  return simplify(flat, ext);
}

bool readsAcc(const loop::ExprP& e) {
  if (e->kind == loop::Expr::Kind::Acc) return true;
  for (auto& a : e->args)
    if (readsAcc(a)) return true;
  return false;
}

}  // namespace

std::optional<Contraction> findContraction(const loop::Kernel& k, int mAxis, int nAxis) {
  if (k.stages.empty()) return std::nullopt;
  Contraction c;
  c.k = -1;
  // Factors and their variables, per stage.
  std::vector<std::pair<loop::ExprP, loop::ExprP>> factors;
  std::vector<std::pair<std::set<int>, std::set<int>>> vars;
  for (auto& s : k.stages) {
    if (s.fn != loop::ReduceFn::Sum || s.axes.size() != 1) return std::nullopt;
    if (c.k >= 0 && s.axes[0].extent != c.k) return std::nullopt;
    c.k = s.axes[0].extent;
    const loop::ExprP& v = s.value;
    if (v->kind != loop::Expr::Kind::Apply || v->fn != tensor::Fn::Mul || v->args.size() != 2) return std::nullopt;
    if (readsAcc(v)) return std::nullopt;
    factors.emplace_back(v->args[0], v->args[1]);
    vars.emplace_back(varsOf(v->args[0]), varsOf(v->args[1]));
  }
  auto separates = [&](int axis, const std::set<int>& with, const std::set<int>& without) {
    int var = k.parallel[static_cast<size_t>(axis)].var;
    return with.count(var) && !without.count(var);
  };
  if (mAxis < 0 || nAxis < 0) {  // choose from stage 0: the widest axis only one factor reads, for each side
    auto widest = [&](const std::set<int>& with, const std::set<int>& without) {
      int best = -1;
      for (int d = 0; d < static_cast<int>(k.parallel.size()); ++d)
        if (separates(d, with, without) && (best < 0 || k.parallel[static_cast<size_t>(d)].extent >= k.parallel[static_cast<size_t>(best)].extent))
          best = d;
      return best;
    };
    mAxis = widest(vars[0].first, vars[0].second);
    nAxis = widest(vars[0].second, vars[0].first);
  }
  if (mAxis < 0 || nAxis < 0 || mAxis == nAxis || mAxis >= static_cast<int>(k.parallel.size()) ||
      nAxis >= static_cast<int>(k.parallel.size()))
    return std::nullopt;
  c.mAxis = mAxis;
  c.nAxis = nAxis;
  c.m = k.parallel[static_cast<size_t>(mAxis)].extent;
  c.n = k.parallel[static_cast<size_t>(nAxis)].extent;
  for (size_t d = 0; d < k.parallel.size(); ++d)
    if (static_cast<int>(d) != mAxis && static_cast<int>(d) != nAxis) c.outerPoints *= k.parallel[d].extent;
  for (size_t s = 0; s < k.stages.size(); ++s) {
    auto [x, y] = factors[s];
    auto [vx, vy] = vars[s];
    if (!(separates(mAxis, vx, vy) && separates(nAxis, vy, vx))) {
      std::swap(x, y);
      std::swap(vx, vy);
    }
    int kVar = k.stages[s].axes[0].var;
    if (!separates(mAxis, vx, vy) || !separates(nAxis, vy, vx) || !vx.count(kVar) || !vy.count(kVar)) return std::nullopt;
    c.stages.push_back(Contraction::Stage{x, y, kVar});
  }
  return c;
}

std::optional<DType> tensorCoreType(const loop::Program& p, const Contraction& c) {
  std::optional<DType> type;
  auto operand = [&](const loop::ExprP& e) {
    const loop::Expr* load = loop::plainLoad(e);
    if (!load) return false;
    DType t = p.buffers[static_cast<size_t>(load->buffer)].dtype;
    if (t != DType::BF16 && t != DType::F16) return false;
    if (type && *type != t) return false;
    type = t;
    return true;
  };
  for (auto& st : c.stages)
    if (!operand(st.a) || !operand(st.b)) return std::nullopt;
  return type;
}

bool asyncCopyable(const loop::Program& p, const loop::Kernel& k, const TiledContraction& s) {
  Contraction c = findContraction(k, s.mAxis, s.nAxis).value();
  // The type the slices hold: f32 for CUDA-core products, the tensor cores' operand type otherwise.
  const bool ffma = s.instruction == TiledContraction::Instruction::Ffma;
  const DType type = ffma ? DType::F32 : s.mmaType;
  const int64_t chunk = 16 / dtypeBytes(type);  // elements one 16-byte copy moves
  if (c.k % chunk != 0 || s.tileK % chunk != 0) return false;
  auto copyable = [&](const loop::ExprP& operand, int kVar) {
    const loop::Expr* load = loop::plainLoad(operand);
    if (!load || load->index.empty()) return false;
    const loop::Buffer& b = p.buffers[static_cast<size_t>(load->buffer)];
    // Rows start 16-byte aligned: the innermost extent past trailing unit axes ([heads][tokens][64][1]) a multiple of c.
    int64_t innermost = 1;
    for (size_t d = b.shape.size(); d-- > 0 && innermost == 1;) innermost = b.shape[d];
    if ((!ffma && b.dtype != DType::BF16 && b.dtype != DType::F16) || b.dtype != type || innermost % chunk != 0) return false;
    bool gathers = false;
    for (const Idx& i : load->index) forEachIndexLoad(i, [&](const IndexNode&) { gathers = true; });
    if (gathers) return false;
    // The flat element index with k = chunk c + j (j < chunk) must be its value at j = 0, plus j: a chunk of consecutive k
    // are consecutive elements, e.g. [row][k], or attention's [head = k / 64][row][k mod 64].
    VarExtents ext = k.extents();
    const int cVar = k.maxVar() + 1, jVar = k.maxVar() + 2;
    ext[cVar] = c.k / chunk;
    ext[jVar] = chunk;
    auto flatAt = [&](const Idx& kValue) {
      return flatIndexWith(*load, b.shape, [&](int v) -> Idx { return v == kVar ? kValue : nullptr; }, ext);
    };
    Idx c8 = idxMul(idxVar(cVar, "c"), chunk);
    Idx step = simplify(flatAt(c8 + idxVar(jVar, "j")) + idxMul(flatAt(c8), -1), ext);
    return sameIdx(step, idxVar(jVar, "j"));
  };
  for (const Contraction::Stage& st : c.stages)
    if (!copyable(st.a, st.kVar) || !copyable(st.b, st.kVar)) return false;
  return true;
}

std::optional<TmaView> tmaView(const loop::Program& p, const loop::Kernel& k, const loop::ExprP& operand, int rowVar, int kVar) {
  const loop::Expr* load = loop::plainLoad(operand);
  if (!load || load->index.empty()) return std::nullopt;
  const loop::Buffer& b = p.buffers[static_cast<size_t>(load->buffer)];
  VarExtents ext = k.extents();
  auto single = [&](int v) { auto it = ext.find(v); return it != ext.end() && it->second == 1; };  // a unit axis: always 0
  // The dimension k indexes; other axes may shift k there (a split's) or the rows in the dimensions before the row's
  // (an expert product's matrix), not both.
  int kDim = -1, rowDim = -1;
  bool other = false, rowShifted = false;  // other: gathers, or variables besides row, k, unit axes and the shifts
  for (size_t d = 0; d < load->index.size(); ++d)
    forEachVar(load->index[d], [&](int v) {
      if (v == kVar) kDim = static_cast<int>(d);
      if (v == rowVar) rowDim = static_cast<int>(d);
    });
  if (kDim < 0) return std::nullopt;
  for (size_t d = 0; d < load->index.size(); ++d) {
    forEachIndexLoad(load->index[d], [&](const IndexNode&) { other = true; });
    forEachVar(load->index[d], [&](int v) {
      const bool shift = v != rowVar && v != kVar && !single(v);
      rowShifted = rowShifted || (shift && static_cast<int>(d) != kDim);
      other = other || (shift && static_cast<int>(d) != kDim && static_cast<int>(d) >= rowDim) ||
              (v == rowVar && static_cast<int>(d) == kDim);
    });
  }
  if (other) return std::nullopt;
  auto flatWith = [&](const Idx& row, const Idx& kValue, bool shifts) {  // unit axes at 0, shifts at 0 or kept
    return flatIndexWith(*load, b.shape, [&](int v) -> Idx {
      return v == kVar ? kValue : v == rowVar ? row : shifts && !single(v) ? nullptr : idxConst(0);
    }, ext);
  };
  auto flatAt = [&](const Idx& row, const Idx& kValue) { return flatWith(row, kValue, false); };
  auto base = constValue(flatAt(idxConst(0), idxConst(0))), next = constValue(flatAt(idxConst(1), idxConst(0)));
  if (!base || !next) return std::nullopt;
  TmaView view{load->buffer, *base, *next - *base, 0, nullptr};
  Idx shift = simplify(substitute(load->index[static_cast<size_t>(kDim)], [&](int v, const std::string&) -> Idx {
                         return v == kVar || single(v) ? idxConst(0) : nullptr;
                       }), ext);
  if (!constValue(shift) || *constValue(shift) != 0) {  // k at shift + k: the map spans the dimension's whole extent
    if (kDim + 1 != static_cast<int>(load->index.size()) || rowShifted) return std::nullopt;
    view.colShift = shift;
    view.cols = b.shape[static_cast<size_t>(kDim)] - (view.offset % b.shape[static_cast<size_t>(kDim)]);
  }
  if (rowShifted) {  // rows at rowShift + row: the map spans the buffer's rows from the offset on
    if (view.rowStride <= 0) return std::nullopt;
    const Idx moved = simplify(flatWith(idxConst(0), idxConst(0), true) + idxConst(-view.offset), ext);
    if (!provablyMultipleOf(moved, view.rowStride, ext)) return std::nullopt;
    view.rowShift = simplify(floorDiv(moved, view.rowStride), ext);
    view.rows = (numel(b.shape) - view.offset) / view.rowStride;
  }
  // affine: flat(row, k) = offset + row * rowStride + k for every row and k
  Idx rest = simplify(flatAt(idxVar(rowVar, "r"), idxVar(kVar, "k")) + idxConst(-view.offset) + idxMul(idxVar(rowVar, "r"), -view.rowStride) +
                          idxMul(idxVar(kVar, "k"), -1),
                      ext);
  const int64_t bytes = dtypeBytes(b.dtype);
  if (!sameIdx(rest, idxConst(0)) || view.rowStride <= 0 || view.offset * bytes % 16 != 0 || view.rowStride * bytes % 16 != 0)
    return std::nullopt;
  return view;
}

bool tmaCopyable(const loop::Program& p, const loop::Kernel& k, const TiledContraction& s) {
  const Contraction c = findContraction(k, s.mAxis, s.nAxis).value();
  const int mVar = k.parallel[static_cast<size_t>(c.mAxis)].var, nVar = k.parallel[static_cast<size_t>(c.nAxis)].var;
  // rows do not overlap; a shifted k (a split's part of the reduction) ends on a slice boundary, so no slice reads the
  // next part's k where cp.async would zero-fill; shifted rows only in expert products (loop::ReadOnlyAt), whose
  // matrices are such rows: other batched products keep the cp.async copies they were measured with
  auto fits = [&](const std::optional<TmaView>& v) {
    return v && v->rowStride >= c.k && (!v->colShift || c.k % s.tileK == 0) && (!v->rowShift || k.readOnlyAt);
  };
  for (const Contraction::Stage& st : c.stages)
    if (!fits(tmaView(p, k, st.a, mVar, st.kVar)) || !fits(tmaView(p, k, st.b, nVar, st.kVar))) return false;
  return true;
}

}  // namespace kiln::tile
