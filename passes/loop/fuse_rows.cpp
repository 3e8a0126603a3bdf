// loop-fuse-rows: a reduction whose result a consumer reads once per row (broadcast along the consumer's
// inner axes) becomes a stage of that consumer: softmax's max and sum, RMSNorm's mean of squares. The
// consumer then runs, per row, the producer's stages, its own stages, and its row's writes — one kernel
// where there were two or three, and the reduced values never go through memory.
//
// The rule: producer P's stages are moved into its readers when
//   - P has stages and writes a temporary, read by at most kMaxFusionWorkGrowth kernels, none as an index;
//   - in every reader C, every load of P is at [p0, .., p{k-1}, 0, ..] for one k: C's own leading axes,
//     then the extent-1 axes P reduced (P's value depends only on C's first k axes: a row of C).
// Each reader runs P's stages once per row; a reader that gets the same stage twice (softmax's max, both
// directly and through the sum) keeps one.
// Pre: kernels in topological order. Post: same order; merged producers are left without readers for
// loop-eliminate-dead-buffers.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "kiln/loop/ir.h"
#include "row_stages.h"

namespace kiln::loop {
namespace {

ExprP shiftAcc(const ExprP& e, int shift) {
  return mapAccs(e, [&](int stage) { return accRef(stage + shift); });
}

// The k of the rule, or -1 when some load of `buffer` in c does not have the row-broadcast form.
int rowPrefix(const Kernel& c, const Kernel& prod) {
  if (c.parallel.size() != prod.parallel.size()) return -1;
  int k = -2;
  bool ok = true;
  auto visit = [&](const ExprP& e) {
    forEachBufferRead(e, [&](int b, bool asIndex) { ok = ok && !(b == prod.output && asIndex); });
    forEachLoad(e, [&](const Expr& l) {
      if (l.buffer != prod.output) return;
      int n = static_cast<int>(l.index.size()), prefix = 0;
      while (prefix < n && sameIdx(l.index[prefix], idxVar(c.parallel[prefix].var, c.parallel[prefix].name)) &&
             prod.parallel[prefix].extent == c.parallel[prefix].extent)
        ++prefix;
      for (int d = prefix; d < n; ++d) ok = ok && constValue(l.index[d]) == 0 && prod.parallel[d].extent == 1;
      if (k == -2) k = prefix;
      ok = ok && k == prefix;
    });
  };
  for (auto& s : c.stages) visit(s.value);
  visit(c.result);
  return ok && k >= 0 ? k : -1;
}

}  // namespace

void moveStagesInto(Kernel& c, const Kernel& prod, int k) {
  int nextVar = c.maxVar() + 1;
  std::map<int, Idx> rename;
  for (int d = 0; d < k; ++d) rename[prod.parallel[d].var] = idxVar(c.parallel[d].var, c.parallel[d].name);
  int axisCount = 0;
  for (auto& s : c.stages) axisCount += static_cast<int>(s.axes.size());
  std::vector<Reduction> stages;
  for (const Reduction& r : prod.stages) {
    Reduction moved = r;
    for (Axis& a : moved.axes) {
      Axis fresh{nextVar++, fmt::format("r{}", axisCount++), a.extent};
      rename[a.var] = idxVar(fresh.var, fresh.name);
      a = fresh;
    }
    stages.push_back(moved);
  }
  auto renamed = [](const ExprP& e, const std::map<int, Idx>& names) {
    return mapIndices(e, [&](const Idx& i) {
      return substitute(i, [&](int v, const std::string&) -> Idx {
        auto it = names.find(v);
        return it == names.end() ? nullptr : it->second;
      });
    });
  };
  std::map<int, Idx> inStages = rename;  // the stages read the row only: an axis after it is 0 there (or unread)
  for (size_t d = static_cast<size_t>(k); d < prod.parallel.size(); ++d) inStages[prod.parallel[d].var] = idxConst(0);
  for (Reduction& r : stages) r.value = renamed(r.value, inStages);
  const ExprP prodResult = renamed(prod.result, rename);
  int shift = static_cast<int>(prod.stages.size());
  // A load of the producer becomes its result there: the axes after the row as the load indexes them.
  auto replace = [&](const ExprP& e) {
    return mapLoads(shiftAcc(e, shift), [&](const Expr& l) -> ExprP {
      if (l.buffer != prod.output) return std::make_shared<Expr>(l);
      std::map<int, Idx> at;
      for (size_t d = static_cast<size_t>(k); d < prod.parallel.size(); ++d) at[prod.parallel[d].var] = l.index[d];
      return renamed(prodResult, at);
    });
  };
  int rowAxes = std::max(c.stages.empty() ? 0 : c.rowAxes, std::min(prod.rowAxes, k));
  for (Reduction& r : c.stages) {
    r.value = replace(r.value);
    stages.push_back(std::move(r));
  }
  c.stages = std::move(stages);
  c.result = replace(c.result);
  c.rowAxes = rowAxes;
  c.origins = mergeOrigins(prod.origins, c.origins);
}

// Two stages that compute the same reduction (softmax's max reaches the final kernel both directly and
// through the sum's stage) become one; later accumulator references are redirected.
void dedupeStages(Kernel& k) {
  std::vector<std::string> keys;
  std::map<int, int> redirect;  // old stage -> kept stage (before renumbering)
  std::vector<int> kept;
  auto canonical = [&](const Reduction& r) {
    std::map<int, Idx> canon;
    for (size_t j = 0; j < r.axes.size(); ++j) canon[r.axes[j].var] = idxVar(-1 - static_cast<int>(j), fmt::format("c{}", j));
    ExprP v = mapIndices(r.value, [&](const Idx& i) {
      return substitute(i, [&](int var, const std::string&) -> Idx {
        auto it = canon.find(var);
        return it == canon.end() ? nullptr : it->second;
      });
    });
    std::string key = fmt::format("{}|", tensor::reduceName(r.fn));
    for (auto& a : r.axes) key += fmt::format("{},", a.extent);
    return key + exprKey(v);
  };
  std::vector<Reduction> stages;
  std::map<int, int> newIndex;
  auto remapAcc = [&](const ExprP& e) { return mapAccs(e, [&](int stage) { return accRef(newIndex.at(stage)); }); };
  std::map<std::string, int> seen;
  for (size_t s = 0; s < k.stages.size(); ++s) {
    Reduction r = k.stages[s];
    r.value = remapAcc(r.value);  // earlier stages already renumbered
    std::string key = canonical(r);
    if (auto it = seen.find(key); it != seen.end()) {
      newIndex[static_cast<int>(s)] = it->second;
      continue;
    }
    newIndex[static_cast<int>(s)] = static_cast<int>(stages.size());
    seen[key] = static_cast<int>(stages.size());
    stages.push_back(std::move(r));
  }
  if (stages.size() == k.stages.size()) return;
  k.stages = std::move(stages);
  k.result = remapAcc(k.result);
}

namespace {

// Kernel c reads buffer b: c among b's readers (kept sorted, each once).
void addReader(std::vector<int>& readers, int c) {
  auto at = std::lower_bound(readers.begin(), readers.end(), c);
  if (at == readers.end() || *at != c) readers.insert(at, c);
}

}  // namespace

// One sweep in kernel order with the readers kept up to date, where restarting from the first kernel after every merge
// was quadratic in the layers (issue 45). A merge changes the readers, and the readers' bodies, of the buffers its
// readers read now: the sweep goes back to the first of their writers, so every producer whose decision could change is
// looked at again, as the restart did (the rest were refused on what is unchanged).
bool fuseRows(Program& p) {
  bool changed = false;
  auto readersOf = readersOfBuffers(p);
  std::vector<int> writer(p.buffers.size(), -1);
  for (size_t i = 0; i < p.kernels.size(); ++i) writer[static_cast<size_t>(p.kernels[i].output)] = static_cast<int>(i);
  for (size_t pi = 0; pi < p.kernels.size();) {
    const Kernel& prod = p.kernels[pi];
    if (prod.stages.empty() || p.buffers[prod.output].kind != Buffer::Kind::Temp) {
      ++pi;
      continue;
    }
    std::vector<std::pair<size_t, int>> readers;  // kernel, k
    bool all = true;
    for (int c : readersOf[prod.output]) {
      int k = rowPrefix(p.kernels[c], prod);
      all = all && k >= 0;
      readers.push_back({c, k});
    }
    // Every reader takes the stages (each recomputes them), within the work-growth bound.
    if (readers.empty() || !all || static_cast<int64_t>(readers.size()) > kMaxFusionWorkGrowth) {
      ++pi;
      continue;
    }
    Kernel copy = prod;
    const int output = prod.output;
    size_t again = pi + 1;
    for (auto [c, k] : readers) {
      moveStagesInto(p.kernels[c], copy, k);
      dedupeStages(p.kernels[c]);
      forEachKernelRead(p.kernels[c], [&](int b, bool) {
        addReader(readersOf[static_cast<size_t>(b)], static_cast<int>(c));
        if (writer[static_cast<size_t>(b)] >= 0) again = std::min(again, static_cast<size_t>(writer[static_cast<size_t>(b)]));
      });
    }
    readersOf[static_cast<size_t>(output)].clear();  // its readers hold its stages now
    // The producer, now unread, is removed by loop-eliminate-dead-buffers.
    changed = true;
    pi = again;
  }
  return changed;
}

}  // namespace kiln::loop
