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
#include "bodies.h"
#include "kiln/support/error.h"

namespace kiln::kernel {
namespace {

// Whether b may run alongside the kernels of `group` (neither writes what the other binds).
bool independent(const Program& p, const std::vector<const Kernel*>& group, const Kernel& b) {
  for (const Kernel* a : group)
    for (const Param& pa : a->params)
      for (const Param& pb : b.params)
        if ((pa.written || pb.written) && storage(p, pa.buffer) == storage(p, pb.buffer)) return false;
  return true;
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
    const bool ok = copyable(p, k);
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
