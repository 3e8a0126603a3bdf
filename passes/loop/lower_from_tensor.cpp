// loop-lower-from-tensor: every Tensor-IR primitive becomes one kernel that writes its own buffer.
// Inputs and weights become buffers without kernels. Nothing is fused yet (loop-fuse-producers does that).
// Post: kernels in the Tensor graph's topological order; each output buffer written by exactly one kernel.
#include <fmt/format.h>

#include <algorithm>

#include "kiln/loop/ir.h"
#include "kiln/support/error.h"

namespace kiln::loop {
namespace {

std::vector<Axis> parallelAxes(const Shape& s) {
  std::vector<Axis> axes;
  for (size_t d = 0; d < s.size(); ++d) axes.push_back({static_cast<int>(d), fmt::format("p{}", d), s[d]});
  return axes;
}

std::vector<Idx> identityIndex(const std::vector<Axis>& axes) {
  std::vector<Idx> idx;
  for (auto& a : axes) idx.push_back(idxVar(a.var, a.name));
  return idx;
}

// An input's or a weight's buffer.
Buffer sourceBuffer(const Program& p, const tensor::Node& n) {
  Buffer b;
  b.kind = n.kind == tensor::Node::Kind::Input ? Buffer::Kind::Input : Buffer::Kind::Weight;
  b.name = n.name;
  // Keep names unique (folded constants and per-layer masks repeat theirs): dumps name buffers.
  for (int k = 1; std::any_of(p.buffers.begin(), p.buffers.end(), [&](const Buffer& o) { return o.name == b.name; }); ++k)
    b.name = fmt::format("{}_{}", n.name, k);
  b.dtype = n.dtype;
  b.shape = n.shape;
  b.weight = n.weight;
  return b;
}

}  // namespace

Program lowerFromTensor(const tensor::Graph& g) {
  using tensor::Node;
  Program p;
  p.modelName = g.modelName;
  std::vector<int> bufferOf(g.nodes.size(), -1);
  std::vector<bool> isOutput(g.nodes.size(), false);
  for (int o : g.outputs) isOutput[o] = true;
  int outputCount = 0;

  auto newBuffer = [&](Buffer b) {
    p.buffers.push_back(std::move(b));
    return static_cast<int>(p.buffers.size()) - 1;
  };
  auto addKernel = [&](const std::string& what, const Shape& shape, DType dtype, bool output, const std::string& origin) {
    Buffer b;
    b.kind = output ? Buffer::Kind::Output : Buffer::Kind::Temp;
    b.name = output ? fmt::format("out{}", outputCount++) : fmt::format("t{}", p.buffers.size());
    b.dtype = dtype;
    b.shape = shape;
    Kernel k;
    k.name = fmt::format("k{}_{}", p.kernels.size(), what);
    k.output = newBuffer(std::move(b));
    k.parallel = parallelAxes(shape);
    // A node may hold several ops (tensor-merge-parallel-linears joins its linears' origins with "; "): an origin each,
    // as the text form reads them back.
    for (size_t from = 0; from < origin.size();) {
      const size_t sep = std::min(origin.find("; ", from), origin.size());
      k.origins.push_back(origin.substr(from, sep - from));
      from = sep + 2;
    }
    p.kernels.push_back(std::move(k));
    return &p.kernels.back();
  };
  // A load of node `n`'s buffer at the current kernel's own parallel index.
  auto loadOf = [&](int n, const std::vector<Idx>& idx) { return load(bufferOf[n], idx); };

  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.kind == Node::Kind::Input || n.kind == Node::Kind::Weight) {
      bufferOf[i] = newBuffer(sourceBuffer(p, n));
      if (n.kind == Node::Kind::Input) p.inputs.push_back(bufferOf[i]);
      continue;
    }
    if (n.kind == Node::Kind::AllReduce)  // tensor-shard makes them; nothing below the Tensor level runs them yet
      userError("{}: a tensor-parallel all-reduce cannot be lowered below the Tensor level yet (kiln compiles "
                "for one device; docs/tensor-parallel.md); compile without --tensor-parallel, or stop at --ir tensor", n.origin.empty() ? "all_reduce" : n.origin);
    std::string what = n.kind == Node::Kind::Elementwise ? tensor::fnName(n.fn)
                       : n.kind == Node::Kind::Reduce    ? std::string("reduce_") + tensor::reduceName(n.reduceFn)
                       : n.kind == Node::Kind::IndexMap  ? "index_map"
                       : n.kind == Node::Kind::Concat    ? "concat"
                                                         : "gather";
    Kernel* k = addKernel(what, n.shape, n.dtype, isOutput[i], n.origin);
    p.buffers[static_cast<size_t>(k->output)].traced = n.traced;
    std::vector<Idx> self = identityIndex(k->parallel);
    switch (n.kind) {
      case Node::Kind::Elementwise: {
        std::vector<ExprP> args;
        for (auto& o : n.operands) args.push_back(o.isImm() ? imm(o.imm) : loadOf(o.node, self));
        auto e = std::make_shared<Expr>(*apply(n.fn, std::move(args)));
        e->castTo = n.dtype;
        k->result = e;
        break;
      }
      case Node::Kind::IndexMap: {
        std::vector<Idx> idx;
        for (auto& e : n.index)
          idx.push_back(substitute(e, [&](int v, const std::string&) { return self.at(v); }));
        k->result = loadOf(n.operands[0].node, idx);
        break;
      }
      case Node::Kind::Reduce: {
        Reduction r;
        r.fn = n.reduceFn;
        std::vector<Idx> idx = self;
        int var = static_cast<int>(n.shape.size());
        for (int a : n.axes) {
          Axis ax{var++, fmt::format("r{}", r.axes.size()), g.nodes[n.operands[0].node].shape[a]};
          idx[a] = idxVar(ax.var, ax.name);
          r.axes.push_back(ax);
        }
        r.value = loadOf(n.operands[0].node, idx);
        k->stages.push_back(std::move(r));
        k->rowAxes = static_cast<int>(k->parallel.size());
        k->result = accRef(0);
        break;
      }
      case Node::Kind::Gather: {
        // table[clamp(ids[p0..p{r-1}], 0, n-1), p{r}]: out-of-range ids read the nearest row, never outside.
        const Node& ids = g.nodes[n.operands[1].node];
        std::vector<Idx> idsIndex(self.begin(), self.end() - 1);
        Idx flat = idxConst(0);
        int64_t stride = 1;
        for (size_t d = idsIndex.size(); d-- > 0;) {
          flat = flat + idxMul(idsIndex[d], stride);
          stride *= ids.shape[d];
        }
        int idsBuffer = bufferOf[n.operands[1].node];
        int64_t rows = g.nodes[n.operands[0].node].shape[0];
        Idx row = idxMin(idxMax(idxLoad(idsBuffer, p.buffers[idsBuffer].name, simplify(flat, k->extents())), idxConst(0)),
                         idxConst(rows - 1));
        k->result = loadOf(n.operands[0].node, {row, self.back()});
        break;
      }
      case Node::Kind::Concat: {
        // select(p_axis < end0, part0[.., p_axis, ..], select(p_axis < end1, part1[.., p_axis - end0, ..], ...)),
        // each part's index clamped into range so that no branch reads outside its part.
        int axis = n.axes[0];
        VarExtents ext = k->extents();
        std::vector<int64_t> ends;
        int64_t end = 0;
        for (auto& o : n.operands) ends.push_back(end += g.nodes[o.node].shape[axis]);
        ExprP result;
        for (size_t part = n.operands.size(); part-- > 0;) {
          int64_t begin = part == 0 ? 0 : ends[part - 1], extent = ends[part] - begin;
          std::vector<Idx> idx = self;
          idx[axis] = simplify(idxMin(idxMax(idxAdd(self[axis], -begin), idxConst(0)), idxConst(extent - 1)), ext);
          ExprP value = loadOf(n.operands[part].node, idx);
          result = result ? select(self[axis], idxConst(ends[part]), value, result) : value;
        }
        k->result = result;
        break;
      }
      default: break;
    }
    bufferOf[i] = k->output;
  }
  // Every model output gets its own output buffer, even when it is an input, a weight or listed twice.
  std::vector<bool> claimed(p.buffers.size(), false);
  for (int o : g.outputs) {
    int b = bufferOf[o];
    if (p.buffers[b].kind == Buffer::Kind::Output && !claimed[b]) {
      claimed[b] = true;
      p.outputs.push_back(b);
      continue;
    }
    Kernel* k = addKernel("copy", g.nodes[o].shape, g.nodes[o].dtype, true, "output copy");
    k->result = load(b, identityIndex(k->parallel));
    claimed.push_back(true);
    p.outputs.push_back(k->output);
  }
  return p;
}

}  // namespace kiln::loop
