#include <algorithm>
#include <fmt/format.h>

#include "kiln/loop/ir.h"

namespace kiln::loop {

const char* bufferKindName(Buffer::Kind k) {
  switch (k) {
    case Buffer::Kind::Input: return "input";
    case Buffer::Kind::Weight: return "weight";
    case Buffer::Kind::Temp: return "temp";
    case Buffer::Kind::Output: return "output";
    case Buffer::Kind::Counters: return "counters";
  }
  return "?";
}

ExprP load(int buffer, std::vector<Idx> index) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::Load;
  e->buffer = buffer;
  e->index = std::move(index);
  return e;
}

ExprP imm(float v) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::Imm;
  e->imm = v;
  return e;
}

ExprP apply(Fn fn, std::vector<ExprP> args) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::Apply;
  e->fn = fn;
  e->args = std::move(args);
  return e;
}

ExprP accRef(int stage) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::Acc;
  e->stage = stage;
  return e;
}

void forEachKernelExpr(const Kernel& k, const std::function<void(const ExprP&)>& f) {
  for (auto& s : k.stages) f(s.value);
  if (k.attention) {
    f(k.attention->dot.value);
    f(k.attention->score);
    f(k.attention->value);
  }
  f(k.result);
}

void mapKernelExprs(Kernel& k, const std::function<ExprP(const ExprP&)>& f) {
  for (auto& s : k.stages) s.value = f(s.value);
  if (k.attention) {
    k.attention->dot.value = f(k.attention->dot.value);
    k.attention->score = f(k.attention->score);
    k.attention->value = f(k.attention->value);
  }
  k.result = f(k.result);
}

void forEachKernelRead(const Kernel& k, const std::function<void(int, bool)>& f) {
  forEachKernelExpr(k, [&](const ExprP& e) { forEachBufferRead(e, f); });
  if (k.readOnlyAt) forEachIndexLoad(k.readOnlyAt->group, [&](const IndexNode& l) { f(l.buffer, true); });
}

Idx renumberIndexBuffers(const Idx& i, const std::function<int(int)>& newId, const std::vector<Buffer>* named) {
  return mapIndexLoads(i, [&](const IndexNode& l, const Idx& flat) {
    const int id = newId(l.buffer);
    return idxLoad(id, named ? (*named)[static_cast<size_t>(id)].name : l.name, flat);
  });
}

ExprP select(Idx lhs, Idx rhs, ExprP a, ExprP b) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::Select;
  e->index = {std::move(lhs), std::move(rhs)};
  e->args = {std::move(a), std::move(b)};
  return e;
}

ExprP chooseOnIndices(const ExprP& cond, const ExprP& x, const ExprP& y) {
  if (cond->kind == Expr::Kind::Imm && (cond->imm == 1.f || cond->imm == 0.f)) return cond->imm == 1.f ? x : y;
  if (cond->kind != Expr::Kind::Select) return nullptr;
  ExprP a = chooseOnIndices(cond->args[0], x, y), b = chooseOnIndices(cond->args[1], x, y);
  if (!a || !b) return nullptr;
  return select(cond->index[0], cond->index[1], std::move(a), std::move(b));
}

void forEachBufferRead(const ExprP& e, const std::function<void(int, bool)>& f) {
  for (auto& i : e->index) forEachIndexLoad(i, [&](const IndexNode& l) { f(l.buffer, true); });
  if (e->kind == Expr::Kind::Load) f(e->buffer, false);
  for (auto& a : e->args) forEachBufferRead(a, f);
}

ExprP renumberBuffers(const ExprP& e, const std::function<int(int)>& newId, const std::vector<Buffer>* named) {
  auto copy = std::make_shared<Expr>(*e);
  if (copy->kind == Expr::Kind::Load) copy->buffer = newId(copy->buffer);
  for (auto& i : copy->index) i = renumberIndexBuffers(i, newId, named);
  for (auto& a : copy->args) a = renumberBuffers(a, newId, named);
  return copy;
}

std::string exprKey(const ExprP& e) {
  switch (e->kind) {
    case Expr::Kind::Imm: return fmt::format("{}", e->imm);
    case Expr::Kind::Acc: return fmt::format("acc{}", e->stage);
    case Expr::Kind::Load: {
      std::string s = fmt::format("b{}[", e->buffer);
      for (auto& i : e->index) s += toString(i) + ",";
      return s + "]";
    }
    case Expr::Kind::Select:
      return fmt::format("sel({}<{}?{}:{})", toString(e->index[0]), toString(e->index[1]), exprKey(e->args[0]), exprKey(e->args[1]));
    case Expr::Kind::Apply: {
      std::string s = fmt::format("{}:{}(", tensor::fnName(e->fn), dtypeName(e->castTo));
      for (auto& a : e->args) s += exprKey(a) + ",";
      return s + ")";
    }
  }
  return "?";
}

ExprP mapLoads(const ExprP& e, const std::function<ExprP(const Expr&)>& f) {
  if (e->kind == Expr::Kind::Load) return f(*e);
  if (e->kind != Expr::Kind::Apply && e->kind != Expr::Kind::Select) return e;
  auto copy = std::make_shared<Expr>(*e);
  for (auto& a : copy->args) a = mapLoads(a, f);
  return copy;
}

ExprP mapAccs(const ExprP& e, const std::function<ExprP(int stage)>& f) {
  if (e->kind == Expr::Kind::Acc) return f(e->stage);
  if (e->args.empty()) return e;
  auto copy = std::make_shared<Expr>(*e);
  for (auto& a : copy->args) a = mapAccs(a, f);
  return copy;
}

ExprP mapIndices(const ExprP& e, const std::function<Idx(const Idx&)>& f) {
  if (e->index.empty() && e->args.empty()) return e;
  auto copy = std::make_shared<Expr>(*e);
  for (auto& i : copy->index) i = f(i);
  for (auto& a : copy->args) a = mapIndices(a, f);
  return copy;
}

void forEachLoad(const ExprP& e, const std::function<void(const Expr&)>& f) {
  if (e->kind == Expr::Kind::Load) f(*e);
  for (auto& a : e->args) forEachLoad(a, f);
}

bool rowInvariant(const ExprP& e, const Kernel& k) {
  bool invariant = true;
  auto check = [&](const Idx& i) {
    forEachVar(i, [&](int v) {
      bool rowVar = false;
      for (int d = 0; d < k.rowAxes; ++d) rowVar = rowVar || k.parallel[static_cast<size_t>(d)].var == v;
      invariant = invariant && rowVar;
    });
  };
  std::function<void(const ExprP&)> visit = [&](const ExprP& x) {
    for (auto& i : x->index) check(i);
    for (auto& a : x->args) visit(a);
  };
  visit(e);
  return invariant;
}

bool readsTotal(const ExprP& e) {
  return e->kind == Expr::Kind::Acc || std::any_of(e->args.begin(), e->args.end(), readsTotal);
}

bool stagesIndependent(const Kernel& k) {
  if (k.stages.size() < 2) return false;
  for (const Reduction& s : k.stages)
    if (s.axes.size() != 1 || s.axes[0].extent != k.stages[0].axes[0].extent || readsTotal(s.value)) return false;
  return true;
}

int64_t applyCount(const ExprP& e) {
  int64_t n = e->kind == Expr::Kind::Apply ? 1 : 0;
  for (auto& a : e->args) n += applyCount(a);
  return n;
}

const Expr* plainLoad(const ExprP& e) {
  const Expr* x = e.get();
  while (x->kind == Expr::Kind::Apply && x->fn == Fn::Cast && x->castTo == DType::F32) x = x->args[0].get();
  return x->kind == Expr::Kind::Load ? x : nullptr;
}

bool usesVar(const Expr& e, int var) {
  bool used = false;
  for (auto& i : e.index) forEachVar(i, [&](int v) { used = used || v == var; });
  for (auto& a : e.args) used = used || usesVar(*a, var);
  return used;
}

std::vector<bool> liveKernels(const Program& p) {
  std::vector<bool> read(p.buffers.size(), false), live(p.kernels.size(), false);
  for (int o : p.outputs) read[static_cast<size_t>(o)] = true;
  for (size_t k = p.kernels.size(); k-- > 0;) {
    if (!read[static_cast<size_t>(p.kernels[k].output)]) continue;
    live[k] = true;
    forEachKernelRead(p.kernels[k], [&](int b, bool) { read[static_cast<size_t>(b)] = true; });
  }
  return live;
}

std::vector<std::vector<int>> readersOfBuffers(const Program& p, const std::vector<bool>* live) {
  std::vector<std::vector<int>> readers(p.buffers.size());
  for (int k = 0; k < static_cast<int>(p.kernels.size()); ++k) {
    if (live && !(*live)[static_cast<size_t>(k)]) continue;
    forEachKernelRead(p.kernels[k], [&](int b, bool) {
      if (readers[b].empty() || readers[b].back() != k) readers[b].push_back(k);
    });
  }
  return readers;
}

VarExtents Kernel::extents() const {
  VarExtents ext;
  for (auto& a : parallel) ext[a.var] = a.extent;
  for (auto& s : stages)
    for (auto& a : s.axes) ext[a.var] = a.extent;
  if (attention) {
    ext[attention->key.var] = attention->key.extent;
    for (auto& a : attention->dot.axes) ext[a.var] = a.extent;
  }
  return ext;
}

int64_t Kernel::rowPoints() const {
  int64_t n = 1;
  for (int d = 0; d < rowAxes; ++d) n *= parallel[d].extent;
  return n;
}

int Kernel::maxVar() const {
  int m = -1;
  for (auto& a : parallel) m = std::max(m, a.var);
  for (auto& s : stages)
    for (auto& a : s.axes) m = std::max(m, a.var);
  if (attention) {
    m = std::max(m, attention->key.var);
    for (auto& a : attention->dot.axes) m = std::max(m, a.var);
  }
  return m;
}

int64_t Kernel::parallelPoints() const {
  int64_t n = 1;
  for (auto& a : parallel) n *= a.extent;
  return n;
}

int64_t Kernel::iterations() const {
  int64_t n = parallelPoints();
  for (auto& s : stages) {
    int64_t steps = rowPoints();
    for (auto& a : s.axes) steps *= a.extent;
    n += steps;
  }
  if (attention) {  // per row and key: the dot and the score; per output point and key: the weighted value
    int64_t depth = 1;
    for (auto& a : attention->dot.axes) depth *= a.extent;
    n += rowPoints() * attention->key.extent * (depth + 1) + parallelPoints() * attention->key.extent;
  }
  return n;
}

}  // namespace kiln::loop
