// kernel-lower-from-tile's common machinery (kernel_builder.h).
#include "kernel_builder.h"

#include <fmt/format.h>

#include "kiln/support/error.h"

namespace kiln::kernel::detail {

Kernel KernelBuilder::build() {
  k_.name = lk_.name;
  k_.origins = lk_.origins;
  param(lk_.output, true);
  if (auto* m = std::get_if<tile::PointwiseMap>(&s_)) pointwise(*m);
  else if (auto* r = std::get_if<tile::RowReduction>(&s_)) rowReduction(*r);
  else if (auto* f = std::get_if<tile::FlashAttention>(&s_)) flashAttention(*f);
  else tiledContraction(std::get<tile::TiledContraction>(s_));
  return std::move(k_);
}

int KernelBuilder::param(int buffer, bool written) {
  for (size_t i = 0; i < k_.params.size(); ++i)
    if (k_.params[i].buffer == buffer) return static_cast<int>(i);
  const loop::Buffer& b = tp_.loop.buffers[buffer];
  k_.params.push_back(Param{buffer, b.name, b.dtype, numel(b.shape), written});
  return static_cast<int>(k_.params.size()) - 1;
}

int KernelBuilder::slot(const std::string& name) {
  k_.floatVars.push_back(name);
  return static_cast<int>(k_.floatVars.size()) - 1;
}

// A Loop-IR index in Kernel-IR terms: variables shifted, index reads addressed through parameters.
Idx KernelBuilder::shifted(const Idx& e) {
  Idx s = substitute(e, [&](int v, const std::string& n) { return idxVar(v + kFirstLoopVar, n); });
  return mapIndexLoads(s, [&](const IndexNode& l, const Idx& flat) {
    int prm = param(l.buffer, false);
    return idxLoad(prm, k_.params[prm].name, flat);
  });
}

// Defines each axis from a flat position in row-major order over the axes.
void KernelBuilder::unflatten(const std::vector<loop::Axis>& axes, const Idx& flat, int64_t flatExtent, Block& out) {
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

FE KernelBuilder::lower(const loop::ExprP& e, Block& out, Cse& cse) {
  if (e->kind == loop::Expr::Kind::Imm) return fconst(e->imm);
  if (e->kind == loop::Expr::Kind::Acc) return fvar(accs_.at(e->stage));
  std::string key = loop::exprKey(e);
  if (auto it = cse.find(key); it != cse.end()) return it->second;
  FE value;
  if (e->kind == loop::Expr::Kind::Select) {
    FE a = lower(e->args[0], out, cse), b = lower(e->args[1], out, cse);
    value = fselect(simplify(shifted(e->index[0]), extents_), simplify(shifted(e->index[1]), extents_), a, b);
  } else if (e->kind == loop::Expr::Kind::Load) {
    value = loadGlobal(param(e->buffer, false), flatIndex(*e));
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

Idx KernelBuilder::flatIndex(const loop::Expr& load) {
  std::vector<Idx> idx;
  for (auto& i : load.index) idx.push_back(shifted(i));
  return rowMajor(idx, tp_.loop.buffers[load.buffer].shape, extents_);
}

Idx KernelBuilder::outputIndex() {
  std::vector<Idx> idx;
  for (auto& a : lk_.parallel) idx.push_back(var(a));
  return rowMajor(idx, tp_.loop.buffers[lk_.output].shape, extents_);
}

// The kernel's result as the stores that lower it afresh take it (pointwise maps, paired product stores, flash attention's
// output): without a final cast to the output's type, which the store rounds to the same way (nvcc keeps both
// conversions and the shift between them: three instructions an element). Not where parts of the result were hoisted
// and are reused through a Cse (storeResult, the row reductions): the hoisted cast would be left unused.
loop::ExprP KernelBuilder::storedResult() const {
  const loop::ExprP& e = lk_.result;
  const DType stored = tp_.loop.buffers[static_cast<size_t>(lk_.output)].dtype;
  const bool finalCast = e->kind == loop::Expr::Kind::Apply && e->fn == Fn::Cast && e->castTo == stored;
  return finalCast ? e->args[0] : e;
}

void KernelBuilder::storeResult(Block& out, Cse cse) {  // (the whole result: callers may have hoisted parts of it into cse)
  FE r = lower(lk_.result, out, cse);
  out.push_back(storeGlobal(0, outputIndex(), r));
}

// Computes the row-invariant parts of the result once per row, before the row's write loop.
void KernelBuilder::hoistRowInvariants(const loop::ExprP& e, Block& out, Cse& cse) {
  bool worthIt = e->kind == loop::Expr::Kind::Apply || e->kind == loop::Expr::Kind::Load || e->kind == loop::Expr::Kind::Select;
  if (worthIt && loop::rowInvariant(e, lk_)) {
    lower(e, out, cse);
    return;
  }
  for (auto& a : e->args) hoistRowInvariants(a, out, cse);
}

// acc_s = combine(acc_s, value_s) in `body` (the loop body over stage s's reduction axes).
void KernelBuilder::accumulate(size_t stage, Block& body) {
  Cse cse;
  const loop::Reduction& r = lk_.stages[stage];
  FE v = lower(r.value, body, cse);
  Fn combine = r.fn == loop::ReduceFn::Sum ? Fn::Add : Fn::Max;
  body.push_back(assign(accs_[stage], fapply(combine, {fvar(accs_[stage]), v})));
}

void KernelBuilder::makeAccumulators() {
  for (size_t s = 0; s < lk_.stages.size(); ++s) accs_.push_back(slot(fmt::format("acc{}", s)));
}

Idx KernelBuilder::defVar(Block& out, const std::string& name, Idx value, int64_t extent) {
  int id = freshKernelVar();
  out.push_back(defIdx(id, name, simplify(value, extents_)));
  extents_[id] = extent;
  return idxVar(id, name);
}

int KernelBuilder::freshLoopVar() {
  if (nextLoopVar_ < 0) nextLoopVar_ = lk_.maxVar() + 1;
  return nextLoopVar_++;
}

int KernelBuilder::freshKernelVar() { return freshLoopVar() + kFirstLoopVar; }

loop::ExprP KernelBuilder::atAxis(const loop::ExprP& e, int var, const Idx& value) {
  return loop::mapIndices(e, [&](const Idx& i) {
    return substitute(i, [&](int v, const std::string&) -> Idx { return v == var ? value : nullptr; });
  });
}

Idx KernelBuilder::outputIndexAt(int var, const Idx& value) {
  std::vector<Idx> idx;
  for (auto& a : lk_.parallel) idx.push_back(a.var == var ? shifted(value) : this->var(a));
  return rowMajor(idx, tp_.loop.buffers[lk_.output].shape, extents_);
}

namespace {
// A non-owning handle on a node of a tree that is kept alive elsewhere (for exprKey).
loop::ExprP handle(const loop::Expr& e) { return loop::ExprP(loop::ExprP{}, &e); }
}  // namespace

void KernelBuilder::vectorLoads(const std::vector<loop::ExprP>& copies, Block& out, Cse& cse) {
  const size_t copiesN = copies.size();
  if (copiesN < 2) return;
  std::vector<std::vector<const loop::Expr*>> loads(copiesN);
  for (size_t v = 0; v < copiesN; ++v) loop::forEachLoad(copies[v], [&](const loop::Expr& l) { loads[v].push_back(&l); });
  for (size_t i = 0; i < loads[0].size(); ++i) {
    const loop::Expr& first = *loads[0][i];
    if (cse.count(loop::exprKey(handle(first)))) continue;
    const DType type = tp_.loop.buffers[static_cast<size_t>(first.buffer)].dtype;
    if (type != DType::F32 && type != DType::BF16 && type != DType::F16) continue;
    // The copies must read consecutive elements: flat index of copy v = that of copy 0 + v.
    std::vector<Idx> flats;
    bool consecutive = true;
    for (size_t v = 0; v < copiesN && consecutive; ++v) {
      flats.push_back(flatIndex(*loads[v][i]));
      auto step = constValue(simplify(flats[v] + idxMul(flats[0], -1), extents_));
      consecutive = step && *step == static_cast<int64_t>(v);
    }
    if (!consecutive) continue;
    // One access moves at most 16 bytes; each must start at a multiple of its width.
    const size_t width = std::min<size_t>(copiesN, static_cast<size_t>(Target::kVectorBytes / dtypeBytes(type)));
    bool aligned = width >= 2;
    for (size_t c = 0; c < copiesN && aligned; c += width) aligned = provablyMultipleOf(flats[c], static_cast<int64_t>(width), extents_);
    if (!aligned) continue;
    const int prm = param(first.buffer, false);
    for (size_t c = 0; c < copiesN; c += width) {
      std::vector<int> slots;
      for (size_t v = c; v < c + width; ++v) {
        slots.push_back(slot(fmt::format("v{}", k_.floatVars.size())));
        cse[loop::exprKey(handle(*loads[v][i]))] = fvar(slots.back());
      }
      out.push_back(loadVector(prm, flats[c], std::move(slots)));
    }
  }
}

void KernelBuilder::storeVector(const std::vector<FE>& values, const Idx& index, Block& out, int buffer) {
  if (buffer < 0) buffer = lk_.output;
  const int target = param(buffer, true);
  const DType type = tp_.loop.buffers[static_cast<size_t>(buffer)].dtype;
  const size_t width = std::min<size_t>(values.size(), static_cast<size_t>(Target::kVectorBytes / dtypeBytes(type)));
  for (size_t c = 0; c < values.size(); c += width) {
    Idx at = simplify(index + idxConst(static_cast<int64_t>(c)), extents_);
    if (width < 2) {
      out.push_back(storeGlobal(target, at, values[c]));
      continue;
    }
    out.push_back(kernel::storeVector(target, at, std::vector<FE>(values.begin() + static_cast<std::ptrdiff_t>(c),
                                                             values.begin() + static_cast<std::ptrdiff_t>(c + width))));
  }
}

}  // namespace kiln::kernel::detail
