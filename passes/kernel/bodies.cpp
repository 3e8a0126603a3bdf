// Kernel bodies copied into other kernels (passes/kernel/bodies.h).
#include "bodies.h"

#include <algorithm>

#include "kiln/support/error.h"

namespace kiln::kernel {

bool cudaCoreFamily(const Block& b) {
  for (const Stmt& s : b) {
    switch (s.kind) {
      case Stmt::Kind::DefIdx:
        if (s.as<op::DefIdx>().warpUniform) return false;
        break;
      case Stmt::Kind::Assign:
      case Stmt::Kind::For:
      case Stmt::Kind::If:
      case Stmt::Kind::StoreGlobal:
      case Stmt::Kind::StoreShared:
      case Stmt::Kind::LoadVector:
      case Stmt::Kind::StoreVector:
      case Stmt::Kind::LoadSharedVector:
      case Stmt::Kind::ShuffleXor:
      case Stmt::Kind::Barrier: break;
      default: return false;
    }
    if (!cudaCoreFamily(s.body)) return false;
  }
  return true;
}

bool hasCollectives(const Block& b) {
  return std::any_of(b.begin(), b.end(), [](const Stmt& s) {
    return s.kind == Stmt::Kind::Barrier || s.kind == Stmt::Kind::ShuffleXor || hasCollectives(s.body);
  });
}

bool copyable(const Program& p, const Kernel& k) {
  if (k.grid[1] != 1 || k.grid[2] != 1 || k.block[1] != 1 || k.block[2] != 1) return false;
  if (k.cluster != 1 || k.groups != 1 || !k.tensorMaps.empty() || !k.pairVars.empty()) return false;
  if (k.dynamicSharedBytes != 0 || k.dynamicBuffersBytes() != 0) return false;
  for (const Param& prm : k.params)
    if (p.buffers.at(static_cast<size_t>(prm.buffer)).kind == loop::Buffer::Kind::Counters) return false;
  return cudaCoreFamily(k.body);
}

int storage(const Program& p, int buffer) {
  for (auto [output, input] : p.inPlace)
    if (buffer == output) return input;
  return buffer;
}

int maxVar(const Block& b) {
  int m = kBlockIdx;
  for (const Stmt& s : b) m = std::max({m, op::definedVar(s.op), maxVar(s.body)});
  return m;
}

namespace {
VarExtents extentsIn(const Block& b, const Stmt& at, VarExtents extents, bool& found) {
  for (const Stmt& s : b) {
    if (&s == &at) {
      found = true;
      return extents;
    }
    if (const auto* d = std::get_if<op::DefIdx>(&s.op)) {
      auto range = idxRange(d->value, extents);
      if (range && range->first >= 0) extents[d->var] = range->second + 1;
    }
    if (s.body.empty()) continue;
    VarExtents inner = extents;
    if (const auto* f = std::get_if<op::For>(&s.op); f && constValue(f->end)) inner[f->var] = *constValue(f->end);
    VarExtents got = extentsIn(s.body, at, std::move(inner), found);
    if (found) return got;
  }
  return extents;
}
}  // namespace

VarExtents extentsAt(const Kernel& k, const Stmt& at) {
  bool found = false;
  return extentsIn(k.body, at, {{kThreadIdx, k.block[0] * k.block[1] * k.block[2]}, {kBlockIdx, k.grid[0]}}, found);
}

void varsRead(const FE& e, std::set<int>& vars) {
  if (!e) return;
  for (const Idx* i : {&e->index, &e->bound})
    if (*i) forEachVar(*i, [&](int v) { vars.insert(v); });
  for (const FE& a : e->args) varsRead(a, vars);
}

void varsRead(const Block& b, std::set<int>& vars) {
  for (const Stmt& s : b) {
    for (const Idx* i : op::indices(s.op))
      if (*i) forEachVar(*i, [&](int v) { vars.insert(v); });
    for (const FE* f : op::floatValues(s.op)) varsRead(*f, vars);
    varsRead(s.body, vars);
  }
}

Idx Renumber::idx(const Idx& e) const {
  if (!e) return e;
  using Op = IndexNode::Op;
  switch (e->op) {
    case Op::Const: return e;
    case Op::Var:
      if (e->var == kBlockIdx) {
        readsBlock = true;
        return blockVar;
      }
      if (e->var == kThreadIdx) return threadVar ? threadVar : e;
      return idxVar(e->var + varOffset, e->name + nameSuffix);
    case Op::Load: return idxLoad(param.at(static_cast<size_t>(e->buffer)), e->name, idx(e->a));
    default: {
      auto n = std::make_shared<IndexNode>(*e);
      n->a = idx(e->a);
      n->b = idx(e->b);
      if (constValue(blockVar) && n->op == Op::Mul) return n->a * n->b;  // a constant block: 0*32 folds away
      if (constValue(blockVar) && n->op == Op::Add) return n->a + n->b;
      return n;
    }
  }
}

FE Renumber::fexpr(const FE& e) const {
  if (!e) return e;
  auto n = std::make_shared<FExpr>(*e);
  if (n->kind == FExpr::Kind::Var) n->var += slotOffset;
  if (n->kind == FExpr::Kind::LoadGlobal) n->param = param.at(static_cast<size_t>(n->param));
  if (n->kind == FExpr::Kind::LoadShared) n->shared = shared.at(static_cast<size_t>(n->shared));
  n->index = idx(e->index);
  n->bound = idx(e->bound);
  for (FE& a : n->args) a = fexpr(a);
  return n;
}

std::vector<int> Renumber::slots(std::vector<int> s) const {
  for (int& v : s) v += slotOffset;
  return s;
}

op::Payload Renumber::payload(const Stmt& s) const {
  return std::visit(
      [&](const auto& o) -> op::Payload {
        using T = std::decay_t<decltype(o)>;
        T c = o;
        if constexpr (std::is_same_v<T, op::DefIdx>) c = {o.var + varOffset, o.name + nameSuffix, idx(o.value), o.warpUniform};
        else if constexpr (std::is_same_v<T, op::Assign>) c = {o.slot + slotOffset, fexpr(o.value)};
        else if constexpr (std::is_same_v<T, op::For>) c = {o.var + varOffset, o.name + nameSuffix, idx(o.begin), idx(o.end), o.step};
        else if constexpr (std::is_same_v<T, op::If>) c = {idx(o.lhs), idx(o.rhs)};
        else if constexpr (std::is_same_v<T, op::StoreGlobal>) c = {param.at(static_cast<size_t>(o.param)), idx(o.index), fexpr(o.value)};
        else if constexpr (std::is_same_v<T, op::StoreShared>) c = {shared.at(static_cast<size_t>(o.shared)), idx(o.index), fexpr(o.value)};
        else if constexpr (std::is_same_v<T, op::LoadVector>) c = {param.at(static_cast<size_t>(o.param)), idx(o.index), slots(o.slots)};
        else if constexpr (std::is_same_v<T, op::StoreVector>) {
          c.param = param.at(static_cast<size_t>(o.param));
          c.index = idx(o.index);
          for (FE& v : c.values) v = fexpr(v);
        } else if constexpr (std::is_same_v<T, op::LoadSharedVector>) c = {shared.at(static_cast<size_t>(o.shared)), idx(o.index), slots(o.slots)};
        else if constexpr (std::is_same_v<T, op::ShuffleXor>) c = {o.dst + slotOffset, o.src + slotOffset, o.laneMask};
        else if constexpr (!std::is_same_v<T, std::monostate>) KILN_ASSERT(false, "kernel-merge-launches: statement {} is not of the merged family", static_cast<int>(s.kind));
        return c;
      },
      s.op);
}

Block Renumber::statements(const Block& b) const {
  Block out;
  for (const Stmt& s : b) {
    Stmt c = Stmt::of(s.kind, payload(s));
    c.body = statements(s.body);
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace kiln::kernel
