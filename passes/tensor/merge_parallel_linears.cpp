// tensor-merge-parallel-linears: matrix products that read the same activation with different constant
// weights (q, k and v; gate and up) become one product against the weights stacked along N, and each
// former result a slice of it: one kernel reads the activation once where three did.
//
// Pattern (what Builder::linear produces): R = Reduce(sum, last axis) of Mul(A, B), where
//   A = IndexMap of the activation x onto [lead.., N, K] that does not use the N axis, and
//   B = IndexMap of a weight W [N, K] as W[o_N, o_K].
// Products with the same x, the same A index, the same lead shape, K and weight dtype form a group, unless
// their results meet in one elementwise computation (see meetPointwise).
// Pre: tensor-compose-index-maps has run (A and B read x and W directly). Post: each group's members are
// dead (tensor-eliminate-dead-code removes them); the merged nodes stand where the group's first product
// stood, so the graph stays topologically ordered.
#include <fmt/format.h>

#include <fmt/ranges.h>

#include <map>
#include <set>

#include "kiln/tensor/ir.h"

namespace kiln::tensor {
namespace {

struct Linear {
  int reduce, x, weight;  // node ids
  std::string key;        // what must be equal within a group
};

std::optional<Linear> matchLinear(const Graph& g, int r) {
  const Node& red = g.nodes[r];
  if (red.kind != Node::Kind::Reduce || red.reduceFn != ReduceFn::Sum) return std::nullopt;
  int rank = static_cast<int>(red.shape.size());
  if (rank < 2 || red.axes != std::vector<int>{rank - 1}) return std::nullopt;
  const Node& mul = g.nodes[red.operands[0].node];
  if (mul.kind != Node::Kind::Elementwise || mul.fn != Fn::Mul || mul.operands[0].isImm() || mul.operands[1].isImm())
    return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    const Node& a = g.nodes[mul.operands[side].node];
    const Node& b = g.nodes[mul.operands[1 - side].node];
    if (a.kind != Node::Kind::IndexMap || b.kind != Node::Kind::IndexMap) continue;
    const Node& w = g.nodes[b.operands[0].node];
    if (w.kind != Node::Kind::Weight || w.shape.size() != 2) continue;
    if (!sameIdx(b.index[0], outVar(rank - 2)) || !sameIdx(b.index[1], outVar(rank - 1))) continue;
    bool usesN = false;
    std::string key = fmt::format("x{}|{}|", a.operands[0].node, dtypeName(w.dtype));
    for (auto& e : a.index) {
      forEachVar(e, [&](int v) { usesN = usesN || v == rank - 2; });
      key += toString(e) + ",";
    }
    if (usesN) continue;
    // The N extent differs within a group; the key records everything else of the product's shape.
    Shape lead = mul.shape;
    lead[rank - 2] = 0;
    key += shapeString(lead);
    return Linear{r, a.operands[0].node, b.operands[0].node, key};
  }
  return std::nullopt;
}

// Nodes reached from `from` through elementwise work and data movement only (not through reductions).
std::set<int> pointwiseClosure(const Graph& g, const std::vector<std::vector<int>>& users, int from) {
  std::set<int> seen;
  std::vector<int> todo{from};
  while (!todo.empty()) {
    int n = todo.back();
    todo.pop_back();
    for (int u : users[n]) {
      auto k = g.nodes[u].kind;
      if ((k == Node::Kind::Elementwise || k == Node::Kind::IndexMap) && seen.insert(u).second) todo.push_back(u);
    }
  }
  return seen;
}

// Products whose results meet in one elementwise computation (silu(gate) * up) are left alone:
// loop-fuse-rows makes them one kernel with an accumulator each, which beats a merged product followed by
// a kernel that reads two slices of it.
bool meetPointwise(const Graph& g, const std::vector<std::vector<int>>& users, const std::vector<Linear>& members) {
  std::set<int> common = pointwiseClosure(g, users, members[0].reduce);
  for (size_t j = 1; j < members.size() && !common.empty(); ++j) {
    std::set<int> next = pointwiseClosure(g, users, members[j].reduce), both;
    for (int n : common)
      if (next.count(n)) both.insert(n);
    common = std::move(both);
  }
  return !common.empty();
}

}  // namespace

bool mergeParallelLinears(Graph& g) {
  std::vector<std::vector<int>> users(g.nodes.size());
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i)
    for (const Operand& o : g.nodes[i].operands)
      if (!o.isImm()) users[o.node].push_back(i);
  std::map<std::string, std::vector<Linear>> groups;
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i)
    if (auto l = matchLinear(g, i)) groups[l->key].push_back(*l);
  for (auto it = groups.begin(); it != groups.end();)
    it = it->second.size() > 1 && meetPointwise(g, users, it->second) ? groups.erase(it) : std::next(it);
  std::map<int, const std::vector<Linear>*> firstOf;  // first member's reduce id -> its group
  std::set<int> later;                                 // the other members' reduce ids
  for (auto& [key, members] : groups)
    if (members.size() > 1) {
      firstOf[members.front().reduce] = &members;
      for (size_t j = 1; j < members.size(); ++j) later.insert(members[j].reduce);
    }
  if (firstOf.empty()) return false;

  Graph out;
  out.modelName = g.modelName;
  std::vector<int> newId(g.nodes.size(), -1);
  auto add = [&](Node n) { return out.add(std::move(n)); };
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    if (later.count(i)) continue;  // already stands as a slice of its group's merged product
    Node n = g.nodes[i];
    for (Operand& o : n.operands)
      if (!o.isImm()) o.node = newId[o.node];
    newId[i] = add(n);
    auto it = firstOf.find(i);
    if (it == firstOf.end()) continue;
    // Stack the group's weights along N and emit the merged product here.
    const std::vector<Linear>& members = *it->second;
    const Node& red = g.nodes[i];
    const Node& mul = g.nodes[red.operands[0].node];
    const Node& aMap = g.nodes[mul.operands[0].node].operands[0].node == members[0].x ? g.nodes[mul.operands[0].node]
                                                                                       : g.nodes[mul.operands[1].node];
    int rank = static_cast<int>(red.shape.size());
    int64_t k = g.nodes[members[0].weight].shape[1], total = 0;
    auto data = std::make_shared<torch::WeightData>();
    std::vector<std::string> names;
    for (const Linear& m : members) {
      const Node& w = g.nodes[m.weight];
      data->values.insert(data->values.end(), w.weight->values.begin(), w.weight->values.end());
      total += w.shape[0];
      names.push_back(w.name);
    }
    data->name = fmt::format("stacked({})", fmt::join(names, ", "));
    Node w{Node::Kind::Weight};
    w.dtype = g.nodes[members[0].weight].dtype;
    w.shape = {total, k};
    w.name = data->name;
    w.weight = data;
    int wId = add(w);
    Shape prod = mul.shape;
    prod[rank - 2] = total;
    Node a = aMap;
    a.shape = prod;
    a.operands = {Operand{newId[members[0].x]}};
    int aId = add(a);
    Node b{Node::Kind::IndexMap};
    b.dtype = w.dtype;
    b.shape = prod;
    b.operands = {Operand{wId}};
    b.index = {outVar(rank - 2), outVar(rank - 1)};
    b.origin = mul.origin;
    int bId = add(b);
    Node m = mul;
    m.shape = prod;
    m.operands = {Operand{aId}, Operand{bId}};
    int mId = add(m);
    Node r = red;
    r.shape = prod;
    r.shape[rank - 1] = 1;
    r.operands = {Operand{mId}};
    for (size_t j = 1; j < members.size(); ++j) r.origin += "; " + g.nodes[members[j].reduce].origin;
    int rId = add(r);
    // Each former product is now a slice of the merged one.
    int64_t offset = 0;
    for (const Linear& mem : members) {
      const Node& old = g.nodes[mem.reduce];
      Node s{Node::Kind::IndexMap};
      s.dtype = old.dtype;
      s.shape = old.shape;
      s.operands = {Operand{rId}};
      for (int d = 0; d < rank; ++d) s.index.push_back(d == rank - 2 ? idxAdd(outVar(d), offset) : outVar(d));
      s.origin = old.origin;
      offset += old.shape[rank - 2];
      newId[mem.reduce] = add(s);
    }
  }
  for (int id : g.inputs) out.inputs.push_back(newId[id]);
  for (int id : g.outputs) out.outputs.push_back(newId[id]);
  g = std::move(out);
  return true;
}

}  // namespace kiln::tensor
