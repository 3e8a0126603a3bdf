// tensor-shard: one rank of a tensor-parallel program (kiln/tensor/ir.h shardForTensorParallel; the rule in
// docs/tensor-parallel.md).
//
// A node is split along at most one axis: each rank holds the same slice of it along that axis (rank r the r-th of
// `ranks` equal parts). The seeds are the output rows of the projections named below. The split then follows the
// values through every node, forward and backward, until nothing changes:
//   - elementwise: the result and all its operands split along the same axis;
//   - reduce: a kept axis follows between operand and result; a summed split axis leaves a partial sum per rank,
//     made whole by an AllReduce after it (a maximum over a split axis is refused);
//   - index_map: output axis k follows input axis a when the index of a is "sharded by" o_k: with o_k below its
//     part (extent / ranks), the index stays below a's part, and moving o_k to rank r's part moves the index by r
//     parts exactly. That is checked by evaluating the index over the variables it uses, so a reshape of heads
//     (o3 + o1*16), a repeat of key/value heads (o1 floordiv 2) and a flatten (o3 floordiv 16) all qualify, and the
//     index expressions stay as they are: rank r's program reads its own slices with rank 0's indices. Any other
//     input axis using o_k must not move with it (o3 mod 16);
//   - gather and concat: the axes that pass through follow; a split table row or concat axis is refused;
//   - weights take the split (rank r keeps its slice of the values); inputs and outputs may not be split.
#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "kiln/support/error.h"
#include "kiln/tensor/ir.h"

namespace kiln::tensor {
namespace {

const char* const kSplitByRows[] = {"q_proj.weight", "k_proj.weight", "v_proj.weight", "gate_proj.weight",
                                    "up_proj.weight"};

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// How one index expression of an index_map moves when output variable k is split into `ranks` parts.
class IndexSplit {
 public:
  IndexSplit(const Idx& e, const Shape& out, int k, int ranks) : e_(e), out_(out), k_(k), ranks_(ranks) {
    forEachVar(e, [&](int v) {
      if (std::find(vars_.begin(), vars_.end(), v) == vars_.end()) vars_.push_back(v);
    });
    forEachIndexLoad(e, [&](const IndexNode&) { readsMemory_ = true; });
  }
  bool uses() const { return std::find(vars_.begin(), vars_.end(), k_) != vars_.end(); }
  // o_k below its part keeps e below `extent / ranks`, and o_k + r parts moves e by r * extent / ranks.
  bool shards(int64_t extent) const {
    if (extent % ranks_ != 0) return false;
    const int64_t part = extent / ranks_;
    return check([&](int64_t base, int64_t moved, int r) { return base >= 0 && base < part && moved == base + r * part; });
  }
  // e does not move with o_k's part.
  bool invariant() const {
    return check([](int64_t base, int64_t moved, int) { return moved == base; });
  }

 private:
  // Every assignment of e's variables with o_k in its first part (at most 2^20 of them, else false).
  bool check(const std::function<bool(int64_t base, int64_t moved, int r)>& ok) const {
    if (readsMemory_ || out_[static_cast<size_t>(k_)] % ranks_ != 0) return false;
    const int64_t step = out_[static_cast<size_t>(k_)] / ranks_;
    int64_t points = 1;
    for (int v : vars_) points *= v == k_ ? step : out_[static_cast<size_t>(v)];
    if (points > (int64_t{1} << 20)) return false;
    std::vector<int64_t> env(out_.size(), 0);
    for (int64_t p = 0; p < points; ++p) {
      int64_t rest = p;
      for (int v : vars_) {
        const int64_t extent = v == k_ ? step : out_[static_cast<size_t>(v)];
        env[static_cast<size_t>(v)] = rest % extent;
        rest /= extent;
      }
      const int64_t base = evaluate(e_, env);
      for (int r = 1; r < ranks_; ++r) {
        std::vector<int64_t> moved = env;
        moved[static_cast<size_t>(k_)] += r * step;
        if (!ok(base, evaluate(e_, moved), r)) return false;
      }
    }
    return true;
  }
  const Idx& e_;
  const Shape& out_;
  int k_, ranks_;
  std::vector<int> vars_;
  bool readsMemory_ = false;
};

class Sharder {
 public:
  Sharder(Graph& g, int ranks) : g_(g), ranks_(ranks), axis_(g.nodes.size(), -1), partial_(g.nodes.size(), false),
                                 users_(g.nodes.size()) {
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (const Operand& o : g.nodes[i].operands)
        if (!o.isImm()) users_[static_cast<size_t>(o.node)].push_back(static_cast<int>(i));
  }

  void propagate() {
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& n = g_.nodes[i];
      if (n.kind == Node::Kind::Weight)
        for (const char* suffix : kSplitByRows)
          if (endsWith(n.name, suffix)) mark(static_cast<int>(i), 0);
    }
    if (queue_.empty())
      userError("--tensor-parallel: '{}' has no weight named *q_proj, *k_proj, *v_proj, *gate_proj or *up_proj to "
                "split; kiln splits Hugging Face-style decoder layers by those names", g_.modelName);
    while (!queue_.empty()) {
      const int n = queue_.front();
      queue_.pop_front();
      relate(n);
      for (int u : users_[static_cast<size_t>(n)]) relate(u);
    }
    for (int o : g_.outputs)
      if (axis_[static_cast<size_t>(o)] >= 0) refuse(o, "is a model output and would be split across the ranks");
  }

  // Rank `rank`'s graph: split shapes, sliced weights, an AllReduce after every partial sum.
  void apply(int rank) {
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      Node& n = g_.nodes[i];
      const int a = axis_[i];
      if (a < 0) continue;
      const int64_t extent = n.shape[static_cast<size_t>(a)];
      if (extent % ranks_ != 0)
        refuse(static_cast<int>(i), fmt::format("has {} along the axis split {} ways, not a multiple of {}; choose a count "
                                                "that divides the heads, the key/value heads and the intermediate size",
                                                extent, ranks_, ranks_));
      if (n.kind == Node::Kind::Weight) n.weight = slice(n, a, rank);
      n.shape[static_cast<size_t>(a)] = extent / ranks_;
    }
    insertAllReduces();
  }

 private:
  [[noreturn]] void refuse(int n, const std::string& why) const {
    const Node& node = g_.nodes[static_cast<size_t>(n)];
    const std::string what = !node.name.empty() ? fmt::format("'{}'", node.name)
                             : node.origin.empty() ? fmt::format("%{}", n)
                                                   : node.origin;
    userError("--tensor-parallel {}: {} {}", ranks_, what, why);
  }

  void mark(int n, int axis) {
    int& a = axis_[static_cast<size_t>(n)];
    if (a == axis) return;
    if (a >= 0) refuse(n, fmt::format("would be split along axes {} and {}", a, axis));
    if (partial_[static_cast<size_t>(n)]) refuse(n, "sums over a split axis and would also be split");
    const Node& node = g_.nodes[static_cast<size_t>(n)];
    if (node.kind == Node::Kind::Input)
      refuse(n, "is an input and would be split (a model with state is not split yet)");
    a = axis;
    queue_.push_back(n);
  }

  int axisOf(const Operand& o) const { return o.isImm() ? -1 : axis_[static_cast<size_t>(o.node)]; }

  // Applies the rule of node u (its kind) between u and its operands.
  void relate(int u) {
    Node& n = g_.nodes[static_cast<size_t>(u)];
    const int self = axis_[static_cast<size_t>(u)];
    switch (n.kind) {
      case Node::Kind::Input:
      case Node::Kind::Weight: return;
      case Node::Kind::Elementwise: {
        int a = self;
        for (const Operand& o : n.operands) a = std::max(a, axisOf(o));
        if (a < 0) return;
        mark(u, a);
        for (const Operand& o : n.operands)
          if (!o.isImm()) mark(o.node, a);
        return;
      }
      case Node::Kind::Reduce: {
        const int in = n.operands[0].node, a = axis_[static_cast<size_t>(in)];
        const bool summed = a >= 0 && std::find(n.axes.begin(), n.axes.end(), a) != n.axes.end();
        if (summed) {
          if (n.reduceFn != ReduceFn::Sum) refuse(u, "takes a maximum over a split axis");
          if (self >= 0) refuse(u, "sums over a split axis and would also be split");
          partial_[static_cast<size_t>(u)] = true;
        } else if (a >= 0) {
          mark(u, a);
        }
        if (self >= 0) mark(in, self);
        return;
      }
      case Node::Kind::IndexMap: relateIndexMap(u); return;
      case Node::Kind::Gather: {
        const int table = n.operands[0].node, ids = n.operands[1].node, last = static_cast<int>(n.shape.size()) - 1;
        if (axis_[static_cast<size_t>(table)] == 0) refuse(table, "is a gather's table, split by rows");
        if (axis_[static_cast<size_t>(table)] == 1 || self == last) {
          mark(u, last);
          mark(table, 1);
        }
        const int a = axis_[static_cast<size_t>(ids)];
        if (a >= 0) mark(u, a);
        if (self >= 0 && self != last) mark(ids, self);
        return;
      }
      case Node::Kind::Concat: {
        int a = self;
        for (const Operand& o : n.operands) a = std::max(a, axisOf(o));
        if (a < 0) return;
        if (a == n.axes.at(0)) refuse(u, "concatenates along a split axis");
        mark(u, a);
        for (const Operand& o : n.operands) mark(o.node, a);
        return;
      }
      case Node::Kind::AllReduce: refuse(u, "is already an all-reduce: the graph was split before");
    }
  }

  void relateIndexMap(int u) {
    const Node& n = g_.nodes[static_cast<size_t>(u)];
    const int in = n.operands[0].node;
    const Shape& inShape = g_.nodes[static_cast<size_t>(in)].shape;
    if (const int a = axis_[static_cast<size_t>(in)]; a >= 0 && axis_[static_cast<size_t>(u)] < 0) {
      // Forward: the output variable that carries input axis a's split.
      for (int k = 0; k < static_cast<int>(n.shape.size()); ++k)
        if (IndexSplit(n.index[static_cast<size_t>(a)], n.shape, k, ranks_).shards(inShape[static_cast<size_t>(a)])) {
          mark(u, k);
          break;
        }
      if (axis_[static_cast<size_t>(u)] < 0)
        refuse(u, fmt::format("cannot follow the split of its input's axis {} into {} parts (the count must divide the "
                              "heads, the key/value heads and the intermediate size; fused projections such as "
                              "qkv_proj or gate_up_proj are not split)", a, ranks_));
    }
    const int k = axis_[static_cast<size_t>(u)];
    if (k < 0) return;
    // Backward: each input axis using o_k is split by it or does not move with it.
    for (size_t a = 0; a < n.index.size(); ++a) {
      IndexSplit split(n.index[a], n.shape, k, ranks_);
      if (!split.uses()) continue;
      if (split.shards(inShape[a])) mark(in, static_cast<int>(a));
      else if (!split.invariant()) refuse(u, fmt::format("reads axis {} of its input in a way a split of o{} cannot follow", a, k));
    }
  }

  std::shared_ptr<const torch::WeightData> slice(const Node& n, int axis, int rank) const {
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; ++d) outer *= n.shape[static_cast<size_t>(d)];
    for (size_t d = static_cast<size_t>(axis) + 1; d < n.shape.size(); ++d) inner *= n.shape[d];
    const int64_t extent = n.shape[static_cast<size_t>(axis)], part = extent / ranks_;
    auto w = std::make_shared<torch::WeightData>();
    w->name = n.weight->name;
    w->values.reserve(static_cast<size_t>(outer * part * inner));
    for (int64_t o = 0; o < outer; ++o) {
      auto from = n.weight->values.begin() + (o * extent + rank * part) * inner;
      w->values.insert(w->values.end(), from, from + part * inner);
    }
    return w;
  }

  // Each partial sum gets an AllReduce right after it, which its users read instead.
  void insertAllReduces() {
    std::vector<Node> nodes;
    std::vector<int> id(g_.nodes.size(), -1);
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      Node n = std::move(g_.nodes[i]);
      for (Operand& o : n.operands)
        if (!o.isImm()) o.node = id[static_cast<size_t>(o.node)];
      nodes.push_back(std::move(n));
      id[i] = static_cast<int>(nodes.size()) - 1;
      if (!partial_[i]) continue;
      Node sum{Node::Kind::AllReduce};
      sum.dtype = nodes.back().dtype;
      sum.shape = nodes.back().shape;
      sum.operands = {Operand{id[i]}};
      sum.origin = nodes.back().origin;
      nodes.push_back(std::move(sum));
      id[i] = static_cast<int>(nodes.size()) - 1;
    }
    g_.nodes = std::move(nodes);
    for (int& i : g_.inputs) i = id[static_cast<size_t>(i)];
    for (int& o : g_.outputs) o = id[static_cast<size_t>(o)];
  }

  Graph& g_;
  int ranks_;
  std::vector<int> axis_;      // per node: its split axis, or -1
  std::vector<bool> partial_;  // per node: a sum over a split axis (each rank's part of it)
  std::vector<std::vector<int>> users_;
  std::deque<int> queue_;
};

}  // namespace

void shardForTensorParallel(Graph& g, int ranks, int rank) {
  if (ranks < 1 || rank < 0 || rank >= ranks)
    userError("--tensor-parallel {}: rank {} is not one of 0 to {}", ranks, rank, ranks - 1);
  if (ranks == 1) return;
  Sharder s(g, ranks);
  s.propagate();
  s.apply(rank);
  verify(g);
}

}  // namespace kiln::tensor
