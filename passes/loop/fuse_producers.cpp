// loop-fuse-producers: inlines producer kernels into their consumers (Halide's compute_inline).
//
// The rule (fusionRefusal): a producer is inlined into all of its consumers, or into none, when
//   - it has no reduction (a kernel ends at its reduction; the reduced value is materialised), and
//   - it does not write a model output, and
//   - it is pure data movement (a single load: transposes, views, broadcasts), or the work it would repeat
//     is bounded: sum over its loads in consumers of the consumer's iterations <= 8 x its own elements, or it is
//     computed from indices alone in at most two operations (no load but index reads: a run-time mask), and
//   - no consumer's expression would hold more than kMaxFusedApplies operations counted as a tree (a value used
//     twice per step, as in `tanh(x) + x` chained, doubles the tree at every inlining: 300 such steps took 24 GB
//     before this bound; the lowering still computes shared subexpressions once).
// Pre: kernels in topological order. Post: same order; inlined producers are left without readers for
// loop-eliminate-dead-buffers to remove.
#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "kiln/loop/ir.h"

namespace kiln::loop {
namespace {

// Consumer iterations spent on loads of `buffer` in kernel k.
int64_t loadIterations(const Kernel& k, int buffer) {
  int64_t total = 0;
  auto count = [&](const ExprP& e, int64_t iters) {
    forEachLoad(e, [&](const Expr& l) {
      if (l.buffer == buffer) total += iters;
    });
  };
  for (auto& s : k.stages) {
    int64_t steps = k.rowPoints();
    for (auto& a : s.axes) steps *= a.extent;
    count(s.value, steps);
  }
  count(k.result, k.parallelPoints());
  return total;
}

// A result computed from indices alone, in a few operations (no load but index reads: a decoder step's causal mask
// after loop-index-comparisons, `select(j < pos[i] + 1, 1, 0)`): cheaper to compute again in every reader than to
// store and load, whatever the number of readers.
bool fromIndicesAlone(const Kernel& k) {
  if (k.attention || !k.stages.empty()) return false;  // (an attention kernel's result reads its accumulator)
  bool other = false;
  std::function<void(const ExprP&)> visit = [&](const ExprP& e) {
    other = other || e->kind == Expr::Kind::Load || e->kind == Expr::Kind::Acc;
    for (const ExprP& a : e->args) visit(a);
  };
  visit(k.result);
  return !other && applyCount(k.result) <= 2;
}

}  // namespace

ExprP inlineProducer(const ExprP& e, const Kernel& producer, const VarExtents& consumerExtents) {
  return mapLoads(e, [&](const Expr& l) -> ExprP {
    if (l.buffer != producer.output) return std::make_shared<Expr>(l);
    // The producer's parallel variables take the values of this load's indices.
    auto rename = [&](int v, const std::string&) -> Idx {
      for (size_t d = 0; d < producer.parallel.size(); ++d)
        if (producer.parallel[d].var == v) return l.index[d];
      return nullptr;
    };
    return mapIndices(producer.result, [&](const Idx& i) { return simplify(substitute(i, rename), consumerExtents); });
  });
}

std::vector<std::string> mergeOrigins(const std::vector<std::string>& producer, const std::vector<std::string>& consumer) {
  std::vector<std::string> origins = producer;
  for (auto& o : consumer)
    if (std::find(origins.begin(), origins.end(), o) == origins.end()) origins.push_back(o);
  return origins;
}

namespace {

// The rule, given the producer's readers (the kernels after it that read its output).
// Only a producer's readers can read its output, so the rule and the inlining visit those, not every later kernel: a
// pass over n layers is linear in n (scanning every later kernel for each producer made it quadratic: issue 45).
std::string refusal(const Program& p, int producer, const std::vector<int>& readers) {
  const Kernel& k = p.kernels[producer];
  if (!k.stages.empty()) return "ends in a reduction, whose result is materialised (see loop-fuse-epilogues and loop-fuse-rows)";
  if (k.attention) return "is an attention kernel (its online softmax is a reduction), whose result is materialised";
  if (p.buffers[k.output].kind == Buffer::Kind::Output) return "writes a model output";
  for (int c : readers) {
    bool asIndex = false;
    auto check = [&](int b, bool idx) { asIndex = asIndex || (b == k.output && idx); };
    forEachKernelRead(p.kernels[c], check);
    if (asIndex) return fmt::format("{} reads its values as indices", p.kernels[c].name);
  }
  int64_t repeated = 0;
  for (int c : readers) repeated += loadIterations(p.kernels[c], k.output);
  if (k.result->kind == Expr::Kind::Load || k.result->kind == Expr::Kind::Imm) return "";
  int64_t own = k.parallelPoints();
  if (repeated > kMaxFusionWorkGrowth * own && !fromIndicesAlone(k))
    return fmt::format("inlining would repeat its work {:.1f}x (consumers evaluate it {} times for {} elements; bound {}x)",
                       static_cast<double>(repeated) / own, repeated, own, kMaxFusionWorkGrowth);
  const int64_t applies = applyCount(k.result);
  for (int c : readers) {
    const Kernel& consumer = p.kernels[c];
    int64_t uses = 0, size = applyCount(consumer.result);
    forEachLoad(consumer.result, [&](const Expr& l) { uses += l.buffer == k.output; });
    for (auto& st : consumer.stages) {
      size += applyCount(st.value);
      forEachLoad(st.value, [&](const Expr& l) { uses += l.buffer == k.output; });
    }
    if (uses > 0 && size + uses * applies > kMaxFusedApplies)
      return fmt::format("{} would hold {} operations (its {} and {} copies of this kernel's {}; bound {})", consumer.name,
                         size + uses * applies, size, uses, applies, kMaxFusedApplies);
  }
  return "";
}

// The readers of kernel `producer`'s output that come after it.
std::vector<int> laterReaders(const std::vector<std::vector<int>>& readers, const Program& p, int producer) {
  std::vector<int> later;
  for (int c : readers[static_cast<size_t>(p.kernels[producer].output)])
    if (c > producer) later.push_back(c);
  return later;
}

}  // namespace

std::string fusionRefusal(const Program& p, int producer) {
  return refusal(p, producer, laterReaders(readersOfBuffers(p), p, producer));
}

// Inlining producer i into a reader adds reads only of buffers written before i (i reads nothing later), whose
// producers the sweep has passed: the readers of every later kernel's output, computed once, stay exact.
bool fuseProducers(Program& p) {
  bool changed = false;
  const std::vector<std::vector<int>> readers = readersOfBuffers(p);
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const std::vector<int> later = laterReaders(readers, p, static_cast<int>(i));
    if (!refusal(p, static_cast<int>(i), later).empty()) continue;
    const Kernel& producer = p.kernels[i];
    for (int c : later) {
      Kernel& k = p.kernels[static_cast<size_t>(c)];
      if (loadIterations(k, producer.output) == 0) continue;
      VarExtents ext = k.extents();
      for (auto& s : k.stages) s.value = inlineProducer(s.value, producer, ext);
      k.result = inlineProducer(k.result, producer, ext);
      k.origins = mergeOrigins(producer.origins, k.origins);
      changed = true;
    }
  }
  return changed;
}

}  // namespace kiln::loop
