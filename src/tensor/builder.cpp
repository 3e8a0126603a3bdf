#include "kiln/tensor/builder.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "kiln/support/error.h"

namespace kiln::tensor {

Shape broadcastShapes(const Shape& a, const Shape& b, const std::string& where) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      userError("{}: shapes [{}] and [{}] do not broadcast", where, shapeString(a), shapeString(b));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int Builder::add(Node n) {
  n.origin = origin_;
  return g_.add(std::move(n));
}

int Builder::normDim(int node, int64_t dim) const {
  int r = rank(node);
  // PyTorch lets dim 0 or -1 name a 0-d tensor's one element. The ops that take a dimension see their 0-d operands as
  // [1] (tensor-lower-from-torch's lowerNode); anything else reaching here with one is refused rather than read past
  // an empty shape.
  if (r == 0)
    userError("{}: dimension {} of a 0-d tensor: kiln does not yet take a dimension argument on a 0-d tensor; give the "
              "value a dimension of size 1 in the model (x.reshape(1))", origin_, dim);
  int64_t d = dim < 0 ? dim + r : dim;
  if (d < 0 || d >= r) userError("{}: dimension {} out of range for a rank-{} tensor", origin_, dim, r);
  return static_cast<int>(d);
}

int Builder::indexMap(int x, Shape shape, std::vector<Idx> index) {
  VarExtents ext;
  for (size_t d = 0; d < shape.size(); ++d) ext[static_cast<int>(d)] = shape[d];
  for (auto& e : index) e = simplify(e, ext);
  Node n{Node::Kind::IndexMap};
  n.dtype = dtype(x);
  n.shape = std::move(shape);
  n.operands = {Operand{x}};
  n.index = std::move(index);
  return add(std::move(n));
}

int Builder::broadcastTo(int x, const Shape& target) {
  const Shape& s = shape(x);
  if (s == target) return x;
  size_t off = target.size() - s.size();
  std::vector<Idx> index;
  for (size_t d = 0; d < s.size(); ++d)
    index.push_back(s[d] == 1 && target[d + off] != 1 ? idxConst(0) : outVar(static_cast<int>(d + off)));
  return indexMap(x, target, std::move(index));
}

namespace {

// PyTorch's type promotion for the types kiln knows; immediates are "weak" (they never widen a tensor's
// floating type, but a fractional immediate makes an integer result f32).
DType promote(DType a, DType b) {
  auto rank = [](DType t) { return t == DType::Bool ? 0 : t == DType::I64 ? 1 : t == DType::F32 ? 3 : 2; };
  if (a == b) return a;
  if (rank(a) == 2 && rank(b) == 2) return DType::F32;  // f16 with bf16
  return rank(a) >= rank(b) ? a : b;
}

bool isComparison(Fn f) {
  return f == Fn::Lt || f == Fn::Le || f == Fn::Gt || f == Fn::Ge || f == Fn::Eq || f == Fn::Ne || f == Fn::And || f == Fn::Not;
}

}  // namespace

int Builder::elementwise(Fn fn, std::vector<Operand> operands) {
  KILN_ASSERT(static_cast<int>(operands.size()) == arity(fn), "{} takes {} operands", fnName(fn), arity(fn));
  Shape out;
  bool first = true;
  std::optional<DType> dt;
  bool fractionalImm = false;
  for (size_t i = 0; i < operands.size(); ++i) {
    const Operand& o = operands[i];
    if (o.isImm()) {
      fractionalImm = fractionalImm || o.imm != std::floor(o.imm);
      continue;
    }
    out = first ? shape(o.node) : broadcastShapes(out, shape(o.node), origin_);
    first = false;
    if (fn == Fn::Where && i == 0) continue;  // the condition does not decide the result type
    dt = dt ? promote(*dt, dtype(o.node)) : dtype(o.node);
  }
  KILN_ASSERT(!first, "{} of immediates only", fnName(fn));
  DType result = dt.value_or(DType::F32);
  if ((result == DType::I64 || result == DType::Bool) && (fractionalImm || fn == Fn::Div)) result = DType::F32;
  if (isComparison(fn)) result = DType::Bool;
  for (auto& o : operands)
    if (!o.isImm()) o.node = broadcastTo(o.node, out);
  Node n{Node::Kind::Elementwise};
  n.fn = fn;
  n.dtype = result;
  n.shape = out;
  n.operands = std::move(operands);
  return add(std::move(n));
}

int Builder::cast(int x, DType to) {
  if (dtype(x) == to) return x;
  int c = unary(Fn::Cast, x);
  g_.nodes[c].dtype = to;
  return c;
}

int Builder::reduce(ReduceFn fn, int x, std::vector<int> axes, bool keepdim) {
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  Node n{Node::Kind::Reduce};
  n.reduceFn = fn;
  n.dtype = dtype(x);
  n.shape = shape(x);
  for (int a : axes) n.shape[a] = 1;
  n.axes = axes;
  n.operands = {Operand{x}};
  int r = add(std::move(n));
  if (keepdim) return r;
  Shape squeezed;
  for (int d = 0; d < rank(x); ++d)
    if (!std::binary_search(axes.begin(), axes.end(), d)) squeezed.push_back(shape(x)[d]);
  return reshape(r, squeezed);
}

int Builder::mean(int x, const std::vector<int>& axes, bool keepdim) {
  int64_t count = 1;
  for (int a : axes) count *= shape(x)[a];
  int s = reduce(ReduceFn::Sum, x, axes, keepdim);
  return binary(Fn::Div, Operand{s}, Operand{-1, static_cast<float>(count)});
}

int Builder::reshape(int x, const Shape& target) {
  const Shape& s = shape(x);
  if (s == target) return x;
  if (numel(s) != numel(target))
    userError("{}: cannot view [{}] ({} elements) as [{}]", origin_, shapeString(s), numel(s), shapeString(target));
  // flat position of the output index, then the input index that has the same flat position
  Idx flat = idxConst(0);
  int64_t stride = 1;
  for (int d = static_cast<int>(target.size()) - 1; d >= 0; --d) {
    flat = flat + idxMul(outVar(d), stride);
    stride *= target[d];
  }
  std::vector<Idx> index(s.size());
  stride = 1;
  for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
    index[d] = mod(floorDiv(flat, stride), s[d]);
    stride *= s[d];
  }
  return indexMap(x, target, std::move(index));
}

int Builder::permute(int x, const std::vector<int>& perm) {
  const Shape& s = shape(x);
  Shape out(s.size());
  std::vector<Idx> index(s.size());
  for (size_t d = 0; d < perm.size(); ++d) {
    out[d] = s[perm[d]];
    index[perm[d]] = outVar(static_cast<int>(d));
  }
  return indexMap(x, out, std::move(index));
}

int Builder::transpose(int x, int d0, int d1) {
  std::vector<int> perm(rank(x));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[d0], perm[d1]);
  return permute(x, perm);
}

int Builder::matmul(int a, int b) {
  bool aVec = rank(a) == 1, bVec = rank(b) == 1;
  if (aVec) a = reshape(a, {1, shape(a)[0]});
  if (bVec) b = reshape(b, {shape(b)[0], 1});
  const Shape &sa = shape(a), &sb = shape(b);
  int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  if (sb[sb.size() - 2] != k)
    userError("{}: matmul of [{}] and [{}]: inner dimensions differ", origin_, shapeString(sa), shapeString(sb));
  Shape batch = broadcastShapes(Shape(sa.begin(), sa.end() - 2), Shape(sb.begin(), sb.end() - 2), origin_);
  int nb = static_cast<int>(batch.size());
  Shape prod = batch;
  prod.insert(prod.end(), {m, n, k});
  auto operandMap = [&](int x, bool isA) {
    const Shape& s = shape(x);
    int xb = static_cast<int>(s.size()) - 2;
    std::vector<Idx> index;
    for (int d = 0; d < xb; ++d) {
      int od = d + (nb - xb);
      index.push_back(s[d] == 1 && batch[od] != 1 ? idxConst(0) : outVar(od));
    }
    if (isA) index.insert(index.end(), {outVar(nb), outVar(nb + 2)});       // a[.., m, k]
    else index.insert(index.end(), {outVar(nb + 2), outVar(nb + 1)});       // b[.., k, n]
    return indexMap(x, prod, std::move(index));
  };
  int product = binary(Fn::Mul, Operand{operandMap(a, true)}, Operand{operandMap(b, false)});
  int out = reduce(ReduceFn::Sum, product, {nb + 2}, false);
  Shape result = batch;
  if (!aVec) result.push_back(m);
  if (!bVec) result.push_back(n);
  return reshape(out, result);
}

int Builder::linear(int x, int w, int bias) {
  const Shape &sx = shape(x), &sw = shape(w);
  if (sw.size() != 2 || sw[1] != sx.back())
    userError("{}: linear of input [{}] with weight [{}]: expected weight [out, {}]", origin_, shapeString(sx),
              shapeString(sw), sx.back());
  int l = static_cast<int>(sx.size()) - 1;
  Shape prod(sx.begin(), sx.end() - 1);
  prod.insert(prod.end(), {sw[0], sx.back()});
  std::vector<Idx> xi;
  for (int d = 0; d < l; ++d) xi.push_back(outVar(d));
  xi.push_back(outVar(l + 1));
  int xs = indexMap(x, prod, xi);
  int ws = indexMap(w, prod, {outVar(l), outVar(l + 1)});
  int out = reduce(ReduceFn::Sum, binary(Fn::Mul, Operand{xs}, Operand{ws}), {l + 1}, false);
  return bias < 0 ? out : binary(Fn::Add, Operand{out}, Operand{bias});
}

int Builder::constant(const Shape& shape, std::vector<float> values, const std::string& name, DType dtype) {
  auto data = std::make_shared<torch::WeightData>();
  data->name = name;
  data->values = std::move(values);
  Node n{Node::Kind::Weight};
  n.shape = shape;
  n.dtype = dtype;
  n.name = name;
  n.weight = std::move(data);
  return add(std::move(n));
}

int Builder::gather(int table, int ids) {
  const Shape& t = shape(table);
  if (t.size() != 2) userError("{}: embedding table must be 2-D, got [{}]", origin_, shapeString(t));
  Node n{Node::Kind::Gather};
  n.dtype = dtype(table);
  n.shape = shape(ids);
  n.shape.push_back(t[1]);
  n.operands = {Operand{table}, Operand{ids}};
  return add(std::move(n));
}

int Builder::concat(const std::vector<int>& parts, int axis) {
  if (parts.size() == 1) return parts[0];
  Node n{Node::Kind::Concat};
  n.dtype = dtype(parts[0]);
  n.shape = shape(parts[0]);
  n.shape[axis] = 0;
  for (int p : parts) {
    n.operands.push_back(Operand{p});
    n.shape[axis] += shape(p)[axis];
  }
  n.axes = {axis};
  return add(std::move(n));
}

int Builder::slice(int x, int axis, int64_t start, int64_t step, int64_t length) {
  Shape out = shape(x);
  if (out[axis] == length && start == 0) return x;
  out[axis] = length;
  std::vector<Idx> index;
  for (int d = 0; d < rank(x); ++d) index.push_back(d == axis ? idxAdd(idxMul(outVar(d), step), start) : outVar(d));
  return indexMap(x, out, std::move(index));
}

int Builder::attention(int q, int k, int v, int mask, bool causal, float scale) {
  int scores = binary(Fn::Mul, Operand{matmul(q, transpose(k, rank(k) - 2, rank(k) - 1))}, Operand{-1, scale});
  // The scores' rank, not q's: q of lower rank than k broadcasts over k's leading dimensions.
  const int r = rank(scores);
  int64_t L = shape(q)[rank(q) - 2], S = shape(k)[rank(k) - 2];
  if (causal) {
    std::vector<float> tri(L * S);
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j) tri[i * S + j] = j <= i ? 0.f : -INFINITY;
    scores = binary(Fn::Add, Operand{scores}, Operand{constant({L, S}, std::move(tri), "causal_mask")});
  }
  if (mask >= 0) {
    if (dtype(mask) == DType::Bool) mask = elementwise(Fn::Where, {Operand{mask}, Operand{-1, 0.f}, Operand{-1, -INFINITY}});
    scores = binary(Fn::Add, Operand{scores}, Operand{mask});
  }
  int m = reduce(ReduceFn::Max, scores, {r - 1}, true);
  int e = unary(Fn::Exp, binary(Fn::Sub, Operand{scores}, Operand{m}));
  int probs = binary(Fn::Div, Operand{e}, Operand{reduce(ReduceFn::Sum, e, {r - 1}, true)});
  // PyTorch's attention softmax is a safe one: a row whose every score is -inf (a fully masked query) gets weights 0,
  // so its output is 0 where a plain softmax would give NaN.
  int empty = binary(Fn::Eq, Operand{m}, Operand{-1, -INFINITY});
  probs = elementwise(Fn::Where, {Operand{empty}, Operand{-1, 0.f}, Operand{probs}});
  return matmul(probs, v);
}

}  // namespace kiln::tensor
