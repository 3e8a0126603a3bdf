// kernel-store-only-changes: a kernel writing a state in place (Program::inPlace: the output on its input's bytes)
// whose stored value is `where(c, new, old)`, old being the input's element at the stored index and c nonzero exactly
// where some comparisons of indices hold, stores `new` under those comparisons and nothing elsewhere: an element it
// would store unchanged is neither loaded nor stored.
//
//   %old = load8 cache[i]; %c = select(j < pos + 1, select(j < pos, 0, 1), 0); %v = where(%c, %new, %old)
//   store8 out[i] = %v                        (out in place of cache)
//   becomes  if (j < pos + 1) { if (pos < j + 1) { store8 out[i] = %new } }
//
// Why: a decoder step's cache write (index_copy of the new keys or values at the position) is a map over the whole
// cache that stores every element, each unchanged but one token's: at a cache of 2,048 positions 4 MB read and written
// a layer for 1 KB of new values, 16 MB at 8,192. The grid stays the cache's; what is gone is its memory traffic.
//
// The rule, on a kernel whose body is index definitions, then loads and assignments, then one global store (vector or
// scalar) to an output in place of an input the kernel reads: every stored value is a slot assigned `where(c, a, b)`
// with one slot c for all of them and b the input's element at the stored index (a slot of a vector load of the input
// at the store's index, at the same position, or such a load itself); c is a slot whose value is a chain of selects on
// index comparisons that is nonzero under a conjunction of comparisons (select(x < y, a, 0): x < y and a; select(x < y,
// 0, b): y < x + 1 and b; a nonzero constant: true). Statements whose slots the guarded store no longer reads go.
// Pre: Program::inPlace is the memory plan's (compileModel sets it before the Kernel passes); runs before
// kernel-merge-launches, whose merged bodies are no longer of the rule's form. Post: the interpreter starts an
// in-place output as its input (kernel::interpret), as the GPU's one set of bytes does.
#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "kiln/kernel/lower.h"

namespace kiln::kernel {
namespace {

using Comparisons = std::vector<std::pair<Idx, Idx>>;  // lhs < rhs, all of them

void slotsRead(const FE& e, std::set<int>& out) {
  if (!e) return;
  if (e->kind == FExpr::Kind::Var) out.insert(e->var);
  for (const FE& a : e->args) slotsRead(a, out);
}

std::set<int> slotsRead(const Stmt& s) {
  std::set<int> out;
  for (const FE* v : op::floatValues(s.op)) slotsRead(*v, out);
  return out;
}

// The slots an assignment or a vector load defines (the only definitions in the rule's bodies).
std::vector<int> slotsDefined(const Stmt& s) {
  return s.kind == Stmt::Kind::Assign || s.kind == Stmt::Kind::LoadVector ? op::floatSlots(s.op) : std::vector<int>{};
}

// The value slot `slot` was last given by an Assign among `body`, null if none.
FE assigned(const Block& body, int slot) {
  FE value;
  for (const Stmt& s : body)
    if (s.kind == Stmt::Kind::Assign && s.as<op::Assign>().slot == slot) value = s.as<op::Assign>().value;
  return value;
}

// The comparisons under which e is nonzero, through the slots `body` assigns; nullopt where that is not such a chain.
std::optional<Comparisons> nonzeroWhere(const Block& body, const FE& e, int depth = 0) {
  if (!e || depth > 16) return std::nullopt;
  if (e->kind == FExpr::Kind::Const) return e->value != 0.f ? std::optional<Comparisons>(Comparisons{}) : std::nullopt;
  if (e->kind == FExpr::Kind::Var) return nonzeroWhere(body, assigned(body, e->var), depth + 1);
  if (e->kind != FExpr::Kind::Select) return std::nullopt;
  const auto zero = [](const FE& x) { return x->kind == FExpr::Kind::Const && x->value == 0.f; };
  std::optional<Comparisons> rest;
  std::pair<Idx, Idx> comparison;
  if (zero(e->args[1])) {
    rest = nonzeroWhere(body, e->args[0], depth + 1);
    comparison = {e->index, e->bound};
  } else if (zero(e->args[0])) {
    rest = nonzeroWhere(body, e->args[1], depth + 1);
    comparison = {e->bound, idxAdd(e->index, 1)};  // not (index < bound): bound <= index
  } else {
    return std::nullopt;
  }
  if (rest) rest->insert(rest->begin(), comparison);
  return rest;
}

// Whether e is element `lane` of `input` at `index` (the store's): a load of it, or the slot of a vector load of it.
bool isOldElement(const Block& body, const FE& e, int input, const Idx& index, size_t lane) {
  if (e->kind == FExpr::Kind::LoadGlobal) return e->param == input && lane == 0 && sameIdx(e->index, index);
  if (e->kind != FExpr::Kind::Var) return false;
  for (const Stmt& s : body) {
    if (s.kind != Stmt::Kind::LoadVector) continue;
    const auto& l = s.as<op::LoadVector>();
    const auto at = std::find(l.slots.begin(), l.slots.end(), e->var);
    if (at != l.slots.end()) return l.param == input && sameIdx(l.index, index) && static_cast<size_t>(at - l.slots.begin()) == lane;
  }
  return false;
}

// Drops the loads and assignments of `body` whose slots nothing after them reads.
Block withoutDeadSlots(Block body) {
  std::set<int> live;
  Block kept;
  for (auto s = body.rbegin(); s != body.rend(); ++s) {
    const std::vector<int> defined = slotsDefined(*s);
    const bool dead = !defined.empty() && std::none_of(defined.begin(), defined.end(), [&](int d) { return live.count(d); });
    if (dead) continue;
    for (int r : slotsRead(*s)) live.insert(r);
    kept.insert(kept.begin(), std::move(*s));
  }
  return kept;
}

FE renumbered(const FE& e, const std::map<int, int>& to) {
  if (!e) return e;
  if (e->kind == FExpr::Kind::Var) return fvar(to.at(e->var));
  if (e->args.empty()) return e;
  auto copy = std::make_shared<FExpr>(*e);
  for (FE& a : copy->args) a = renumbered(a, to);
  return copy;
}

// The slots of a body of index definitions, ifs, loads, assignments and stores (the rule's kernels) renumbered by `to`.
void renumber(Block& body, const std::map<int, int>& to) {
  for (Stmt& s : body) {
    if (s.kind == Stmt::Kind::If) renumber(s.body, to);
    if (s.kind == Stmt::Kind::Assign) {
      auto& a = s.as<op::Assign>();
      a.slot = to.at(a.slot);
      a.value = renumbered(a.value, to);
    }
    if (s.kind == Stmt::Kind::LoadVector)
      for (int& slot : s.as<op::LoadVector>().slots) slot = to.at(slot);
    if (s.kind == Stmt::Kind::StoreVector)
      for (FE& v : s.as<op::StoreVector>().values) v = renumbered(v, to);
    if (s.kind == Stmt::Kind::StoreGlobal) s.as<op::StoreGlobal>().value = renumbered(s.as<op::StoreGlobal>().value, to);
  }
}

void slotsUsed(const Block& body, std::set<int>& used) {
  for (const Stmt& s : body) {
    slotsUsed(s.body, used);
    for (int named : op::floatSlots(s.op)) used.insert(named);
    for (int r : slotsRead(s)) used.insert(r);
  }
}

// The float slots the rewritten body no longer names go from the kernel's declarations (nvcc refuses a declared local
// never referenced), the rest keep their order.
void dropUnusedSlots(Kernel& k) {
  std::set<int> used;
  slotsUsed(k.body, used);
  std::map<int, int> to;
  std::vector<std::string> names;
  for (int slot : used) {
    to[slot] = static_cast<int>(names.size());
    names.push_back(k.floatVars[static_cast<size_t>(slot)]);
  }
  renumber(k.body, to);
  k.floatVars = std::move(names);
}

// The rule on kernel k; whether it changed it.
bool storeOnlyChanges(Kernel& k, const std::vector<std::pair<int, int>>& inPlace) {
  if (k.body.empty()) return false;
  Stmt& store = k.body.back();
  if (store.kind != Stmt::Kind::StoreVector && store.kind != Stmt::Kind::StoreGlobal) return false;
  const bool vector = store.kind == Stmt::Kind::StoreVector;
  const int out = vector ? store.as<op::StoreVector>().param : store.as<op::StoreGlobal>().param;
  const Idx index = vector ? store.as<op::StoreVector>().index : store.as<op::StoreGlobal>().index;
  std::vector<FE> values = vector ? store.as<op::StoreVector>().values : std::vector<FE>{store.as<op::StoreGlobal>().value};
  int input = -1;
  for (auto [o, i] : inPlace)
    if (o == k.params[static_cast<size_t>(out)].buffer)
      for (size_t q = 0; q < k.params.size(); ++q)
        if (k.params[q].buffer == i && !k.params[q].written) input = static_cast<int>(q);
  if (input < 0) return false;
  size_t firstWork = 0;  // index definitions first, then loads and assignments only
  while (firstWork < k.body.size() && k.body[firstWork].kind == Stmt::Kind::DefIdx) ++firstWork;
  for (size_t i = firstWork; i + 1 < k.body.size(); ++i)
    if (k.body[i].kind != Stmt::Kind::Assign && k.body[i].kind != Stmt::Kind::LoadVector) return false;
  const Block work(k.body.begin() + static_cast<std::ptrdiff_t>(firstWork), k.body.end() - 1);
  FE condition;
  for (size_t lane = 0; lane < values.size(); ++lane) {
    const FE& v = values[lane];
    const FE where = v->kind == FExpr::Kind::Var ? assigned(work, v->var) : v;
    if (!where || where->kind != FExpr::Kind::Apply || where->fn != Fn::Where) return false;
    const FE& c = where->args[0];
    if (c->kind != FExpr::Kind::Var || (condition && condition->var != c->var)) return false;
    if (!isOldElement(work, where->args[2], input, index, lane)) return false;
    condition = c;
    values[lane] = where->args[1];
  }
  const std::optional<Comparisons> guard = nonzeroWhere(work, condition);
  if (!guard || guard->empty()) return false;
  Stmt changed = store;
  if (vector) changed.as<op::StoreVector>().values = values;
  else changed.as<op::StoreGlobal>().value = values[0];
  Block inner = work;
  inner.push_back(std::move(changed));
  inner = withoutDeadSlots(std::move(inner));
  for (auto c = guard->rbegin(); c != guard->rend(); ++c) inner = Block{ifLess(c->first, c->second, std::move(inner))};
  k.body.resize(firstWork);
  for (Stmt& s : inner) k.body.push_back(std::move(s));
  dropUnusedSlots(k);
  return true;
}

}  // namespace

bool storeOnlyChanges(Program& p) {
  bool changed = false;
  for (Kernel& k : p.kernels) changed = storeOnlyChanges(k, p.inPlace) || changed;
  return changed;
}

}  // namespace kiln::kernel
