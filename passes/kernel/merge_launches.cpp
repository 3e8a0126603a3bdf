// kernel-merge-launches (kiln/kernel/lower.h): adjacent kernels that neither read nor write what the others write
// become one launch whose blocks each run one of their bodies, chosen by blockIdx.x.
//
// Why: every launch is a step of the forward's dependent chain. Even overlapped (kernel-overlap-launches), a kernel
// waits at its top for the whole grid before it, so each step costs the drain of one grid and the start of the next:
// about a microsecond or more whatever the kernel does. A decoder step is full of kernels doing a few hundred bytes of
// work that do not depend on each other (the rotary of q and of k, a layer's position counter, the writes of k and v
// into the caches): as one launch they are one step of the chain.
//
// What merges: kernels of the CUDA-core family (definitions, loops, conditions, global and shared loads and stores,
// block barriers and warp shuffles; no tensor-core, asynchronous-copy, mbarrier, cluster or counter statements),
// one-dimensional, without dynamic shared memory, whose static shared memory fits the target's together. The merged
// block is the widest of theirs; a body whose own block is narrower runs under `threadIdx.x < its width`, so such a
// body may hold no barrier or shuffle (those need every thread of the block, or of a warp, to reach them). A state
// the memory plan may update in place (Program::inPlace) counts as one buffer with its current value. Each body keeps
// its own parameters, shared buffers and registers; its blockIdx.x becomes `blockIdx.x - first`, where `first` is
// its first block in the merged grid.
#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <set>

#include "kiln/kernel/lower.h"
#include "kiln/support/error.h"

namespace kiln::kernel {
namespace {

bool mergeableStatements(const Block& b) {
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
    if (!mergeableStatements(s.body)) return false;
  }
  return true;
}

bool hasCollectives(const Block& b) {
  return std::any_of(b.begin(), b.end(), [](const Stmt& s) {
    return s.kind == Stmt::Kind::Barrier || s.kind == Stmt::Kind::ShuffleXor || hasCollectives(s.body);
  });
}

bool mergeable(const Program& p, const Kernel& k) {
  if (k.grid[1] != 1 || k.grid[2] != 1 || k.block[1] != 1 || k.block[2] != 1) return false;
  if (k.cluster != 1 || k.groups != 1 || !k.tensorMaps.empty() || !k.pairVars.empty()) return false;
  if (k.dynamicSharedBytes != 0 || k.dynamicBuffersBytes() != 0) return false;
  for (const Param& prm : k.params)
    if (p.buffers.at(static_cast<size_t>(prm.buffer)).kind == loop::Buffer::Kind::Counters) return false;
  return mergeableStatements(k.body);
}

// The buffer a parameter's bytes belong to: a state's new value written in place is its current value's.
int storage(const Program& p, int buffer) {
  for (auto [output, input] : p.inPlace)
    if (buffer == output) return input;
  return buffer;
}

// Whether b may run alongside the kernels of `group` (neither writes what the other binds).
bool independent(const Program& p, const std::vector<const Kernel*>& group, const Kernel& b) {
  for (const Kernel* a : group)
    for (const Param& pa : a->params)
      for (const Param& pb : b.params)
        if ((pa.written || pb.written) && storage(p, pa.buffer) == storage(p, pb.buffer)) return false;
  return true;
}

// Copies a kernel's statements into the merged kernel: its parameters, shared buffers, float slots and index
// variables renumbered to the merged kernel's, its blockIdx.x read as variable `block`.
struct Renumber {
  std::vector<int> param, shared;
  int slotOffset = 0, varOffset = 0;
  Idx blockVar;  // what blockIdx.x reads as
  mutable bool readsBlock = false;  // whether the body read blockIdx.x (nvcc refuses an unused definition)

  Idx idx(const Idx& e) const {
    if (!e) return e;
    using Op = IndexNode::Op;
    switch (e->op) {
      case Op::Const: return e;
      case Op::Var:
        if (e->var == kBlockIdx) {
          readsBlock = true;
          return blockVar;
        }
        if (e->var == kThreadIdx) return e;
        return idxVar(e->var + varOffset, e->name);
      case Op::Load: return idxLoad(param.at(static_cast<size_t>(e->buffer)), e->name, idx(e->a));
      default: {
        auto n = std::make_shared<IndexNode>(*e);
        n->a = idx(e->a);
        n->b = idx(e->b);
        return n;
      }
    }
  }

  FE fexpr(const FE& e) const {
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

  std::vector<int> slots(std::vector<int> s) const {
    for (int& v : s) v += slotOffset;
    return s;
  }

  op::Payload payload(const Stmt& s) const {
    return std::visit(
        [&](const auto& o) -> op::Payload {
          using T = std::decay_t<decltype(o)>;
          T c = o;
          if constexpr (std::is_same_v<T, op::DefIdx>) c = {o.var + varOffset, o.name, idx(o.value), o.warpUniform};
          else if constexpr (std::is_same_v<T, op::Assign>) c = {o.slot + slotOffset, fexpr(o.value)};
          else if constexpr (std::is_same_v<T, op::For>) c = {o.var + varOffset, o.name, idx(o.begin), idx(o.end), o.step};
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

  Block statements(const Block& b) const {
    Block out;
    for (const Stmt& s : b) {
      Stmt c = Stmt::of(s.kind, payload(s));
      c.body = statements(s.body);
      out.push_back(std::move(c));
    }
    return out;
  }
};

// The largest index variable id a block defines.
int maxVar(const Block& b) {
  int m = kBlockIdx;
  for (const Stmt& s : b) m = std::max({m, op::definedVar(s.op), maxVar(s.body)});
  return m;
}

// One kernel running every kernel of `group` (two or more) on its own range of blocks, in order.
Kernel merge(const std::vector<const Kernel*>& group) {
  Kernel m;
  m.name = group.front()->name;
  for (size_t n = 1; n < group.size(); ++n) m.name += "__" + group[n]->name;
  for (const Kernel* k : group) m.block[0] = std::max(m.block[0], k->block[0]);
  // Index variables: each body's own ids shifted past those of the bodies before it; then one `block` id per body.
  std::vector<int> varOffset;
  int used = 0;
  for (const Kernel* k : group) {
    varOffset.push_back(used);
    used += maxVar(k->body) - kBlockIdx;
  }
  int64_t first = 0;
  for (size_t n = 0; n < group.size(); ++n) {
    const Kernel& k = *group[n];
    Renumber r;
    for (const Param& prm : k.params) {
      auto same = std::find_if(m.params.begin(), m.params.end(), [&](const Param& q) {
        return q.buffer == prm.buffer && !q.written && !prm.written;  // a buffer both only read: one parameter
      });
      if (same == m.params.end()) same = m.params.insert(m.params.end(), prm);
      r.param.push_back(static_cast<int>(same - m.params.begin()));
    }
    for (const SharedBuffer& sb : k.shared) {
      r.shared.push_back(static_cast<int>(m.shared.size()));
      m.shared.push_back(sb);
    }
    r.slotOffset = static_cast<int>(m.floatVars.size());
    for (const std::string& f : k.floatVars)  // a float slot's name is the kernel's (the IR's text names slots)
      m.floatVars.push_back(n == 0 ? f : fmt::format("{}_{}", f, n));
    r.varOffset = varOffset[n];
    const int blockVar = kBlockIdx + 1 + used + static_cast<int>(n);
    r.blockVar = idxVar(blockVar, "block");
    Block body = r.statements(k.body);
    if (k.block[0] < m.block[0]) body = {ifLess(threadIdx(), idxConst(k.block[0]), std::move(body))};
    if (r.readsBlock) body.insert(body.begin(), defIdx(blockVar, "block", idxAdd(blockIdx(), -first)));
    Stmt range = ifLess(blockIdx(), idxConst(first + k.grid[0]), std::move(body));
    if (first > 0) range = ifLess(idxConst(first - 1), blockIdx(), {std::move(range)});
    m.body.push_back(std::move(range));
    first += k.grid[0];
    m.origins = loop::mergeOrigins(m.origins, k.origins);
  }
  m.grid[0] = first;
  return m;
}

int64_t staticShared(const std::vector<const Kernel*>& group) {
  int64_t bytes = 0;
  for (const Kernel* k : group) bytes += k->sharedBytes();
  return bytes;
}

}  // namespace

bool mergeLaunches(Program& p) {
  std::vector<Kernel> out;
  std::vector<const Kernel*> group;
  bool groupMergeable = false;  // whether the open group's kernels may take another
  bool changed = false;
  auto flush = [&] {
    if (group.size() == 1) out.push_back(*group.front());
    if (group.size() > 1) {
      out.push_back(merge(group));
      changed = true;
    }
    group.clear();
  };
  for (const Kernel& k : p.kernels) {
    const bool ok = mergeable(p, k);
    if (groupMergeable && ok && independent(p, group, k)) {
      std::vector<const Kernel*> with = group;
      with.push_back(&k);
      const int64_t widest = std::max_element(with.begin(), with.end(), [](const Kernel* a, const Kernel* b) {
                               return a->block[0] < b->block[0];
                             })[0]->block[0];
      const bool narrowOk = std::all_of(with.begin(), with.end(), [&](const Kernel* x) {
        return x->block[0] == widest || !hasCollectives(x->body);
      });
      if (narrowOk && staticShared(with) <= p.target.staticSharedPerBlock) {
        group = std::move(with);
        continue;
      }
    }
    flush();
    group.push_back(&k);
    groupMergeable = ok;
  }
  flush();
  if (changed) p.kernels = std::move(out);
  return changed;
}

}  // namespace kiln::kernel
