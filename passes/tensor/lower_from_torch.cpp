// tensor-lower-from-torch: decomposes each aten op into Tensor-IR primitives.
// Pre: a verified Torch IR graph (shapes static, non-tensor operands constant).
// Post: a Tensor IR graph computing the same outputs; every node records the Torch op it came from.
// An op without a decomposition here is a user error naming the op, its source line and docs/ops.md.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "kiln/support/error.h"
#include "kiln/tensor/builder.h"
#include "kiln/tensor/op_catalog.h"
#include "routing.h"

namespace kiln::tensor {
namespace {

struct Lowering {
  const torch::Graph& tg;
  Graph& g;
  Builder b;
  std::map<int, int> nodeOf;  // torch value id -> tensor node id
  const torch::Node* cur = nullptr;

  const torch::Value& value(int i) const { return tg.values[cur->inputs.at(i)]; }
  size_t argc() const { return cur->inputs.size(); }
  std::string where() const { return cur->op + " at " + cur->loc.str(); }

  [[noreturn]] void unsupported(const std::string& why) const {
    userError("{}: {}; see docs/ops.md for what kiln supports", where(), why);
  }

  // Tensor operand i as a node (weights become Weight nodes once).
  int tensor(int i) {
    int vid = cur->inputs.at(i);
    if (auto it = nodeOf.find(vid); it != nodeOf.end()) return it->second;
    const torch::Value& v = tg.values[vid];
    if (v.kind != torch::Value::Kind::Weight) unsupported(fmt::format("operand {} is not a tensor", i));
    Node n{Node::Kind::Weight};
    n.dtype = v.dtype;
    n.shape = v.shape;
    n.name = v.weight->name;
    n.weight = v.weight;
    int id = g.add(std::move(n));
    nodeOf[vid] = id;
    return id;
  }

  // Operand i of an arithmetic op: a scalar constant or one-element constant tensor becomes an immediate.
  Operand operand(int i) {
    const torch::Value& v = value(i);
    if (v.kind == torch::Value::Kind::Constant) return Operand{-1, static_cast<float>(number(i))};
    if (v.kind == torch::Value::Kind::Weight && v.shape.empty()) return Operand{-1, v.weight->values.at(0)};
    return Operand{tensor(i)};
  }

  bool isNone(int i) const {
    return i >= static_cast<int>(argc()) || (std::holds_alternative<torch::None>(value(i).constant) && !value(i).isTensor());
  }
  double number(int i) const {
    const auto& c = value(i).constant;
    if (auto* d = std::get_if<double>(&c)) return *d;
    if (auto* n = std::get_if<int64_t>(&c)) return static_cast<double>(*n);
    if (auto* bl = std::get_if<bool>(&c)) return *bl;
    unsupported(fmt::format("operand {} must be a constant number", i));
  }
  int64_t integer(int i) const {
    if (auto* n = std::get_if<int64_t>(&value(i).constant)) return *n;
    unsupported(fmt::format("operand {} must be a constant integer", i));
  }
  bool boolean(int i) const {
    if (auto* bl = std::get_if<bool>(&value(i).constant)) return *bl;
    return integer(i) != 0;
  }
  std::vector<int64_t> ints(int i) const {
    if (auto* v = std::get_if<std::vector<int64_t>>(&value(i).constant)) return *v;
    if (auto* n = std::get_if<int64_t>(&value(i).constant)) return {*n};
    unsupported(fmt::format("operand {} must be a constant integer list", i));
  }
  std::vector<int> dims(int x, int i) {
    std::vector<int> out;
    for (int64_t d : ints(i)) out.push_back(b.normDim(x, d));
    return out;
  }
  const Shape& resultShape(int k = 0) const { return tg.values[cur->outputs.at(k)].shape; }
  DType resultType(int k = 0) const { return tg.values[cur->outputs.at(k)].dtype; }

  int addScaled(Fn fn) {  // add/sub with alpha
    Operand y = operand(1);
    if (argc() > 2 && !isNone(2) && number(2) != 1.0) {
      float alpha = static_cast<float>(number(2));
      y = y.isImm() ? Operand{-1, y.imm * alpha} : Operand{b.binary(Fn::Mul, y, Operand{-1, alpha})};
    }
    Operand x = operand(0);  // a constant too (zeros_like of a 0-d input + x): the builder broadcasts it
    if (x.isImm() && y.isImm()) unsupported("both operands are constants");
    return b.binary(fn, x, y);
  }

  int softmax() {
    int x = tensor(0);  // (softmax(x, d, dtype): computed in f32 either way; the cast after it keeps the attention
                        // pattern loop-fuse-attention matches)
    int d = b.normDim(x, integer(1));
    int m = b.reduce(ReduceFn::Max, x, {d}, true);
    int e = b.unary(Fn::Exp, b.binary(Fn::Sub, Operand{x}, Operand{m}));
    int s = b.reduce(ReduceFn::Sum, e, {d}, true);
    return b.binary(Fn::Div, Operand{e}, Operand{s});
  }

  int rmsNorm() {
    int x = tensor(0);
    int n = static_cast<int>(ints(1).size());
    std::vector<int> axes;
    for (int d = b.rank(x) - n; d < b.rank(x); ++d) axes.push_back(d);
    double eps = isNone(3) ? 1.1920928955078125e-07 : number(3);  // torch.finfo(float32).eps by default
    int ms = b.mean(b.binary(Fn::Mul, Operand{x}, Operand{x}), axes, true);
    int r = b.unary(Fn::Rsqrt, b.binary(Fn::Add, Operand{ms}, Operand{-1, static_cast<float>(eps)}));
    int y = b.binary(Fn::Mul, Operand{x}, Operand{r});
    return isNone(2) ? y : b.binary(Fn::Mul, Operand{y}, Operand{tensor(2)});
  }

  // layer_norm(x, normalized_shape, weight, bias, eps): (x - mean) * rsqrt(mean((x - mean)^2) + eps) * w + b over
  // the trailing normalized dims (the biased variance, as PyTorch). native_layer_norm takes the same arguments and
  // also returns the mean and rstd = rsqrt(var + eps) it used, the normalized dims kept as 1s: {result, mean, rstd}.
  // Those two are computed apart from the ones the result uses: as outputs they are stored in x's dtype, and a result
  // made from their stored values would carry that rounding (bf16: 2.4e-3 where LibTorch's is 8.6e-4, OpInfo's sample);
  // its own stay inside its kernel, in f32. Unused (as in most models), they are removed as dead code.
  std::vector<int> layerNormParts() {
    int x = tensor(0);
    int n = static_cast<int>(ints(1).size());
    std::vector<int> axes;
    for (int d = b.rank(x) - n; d < b.rank(x); ++d) axes.push_back(d);
    const float eps = static_cast<float>(argc() > 4 && !isNone(4) ? number(4) : 1e-5);
    const Moments own = moments(x, axes, eps);
    int y = b.binary(Fn::Mul, Operand{own.centred}, Operand{own.rstd});
    if (argc() > 2 && !isNone(2)) y = b.binary(Fn::Mul, Operand{y}, Operand{tensor(2)});
    if (argc() > 3 && !isNone(3)) y = b.binary(Fn::Add, Operand{y}, Operand{tensor(3)});
    if (cur->op != "aten::native_layer_norm") return {y};
    const Moments returned = moments(x, axes, eps);
    return {y, returned.mean, returned.rstd};
  }

  // The mean of x over `axes` (kept as 1s), x minus it, and rsqrt(mean((x - mean)^2) + eps). The mean is taken of x
  // shifted by its first element over `axes`, c: x - c is small where x is far from 0 (data at 1000 with a spread of 1),
  // so its f32 sum loses little, where sum(x) lost the low bits that x - mean is made of (issue 54: 2-4x LibTorch's
  // error against f64). mean = c + mean(x - c), x - mean = (x - c) - mean(x - c).
  struct Moments {
    int mean, centred, rstd;
  };
  Moments moments(int x, const std::vector<int>& axes, float eps) {
    int first = x;
    for (int a : axes) first = b.slice(first, a, 0, 1, 1);
    const int shifted = b.binary(Fn::Sub, Operand{x}, Operand{first});
    const int shiftedMean = b.mean(shifted, axes, true);
    const int mean = b.binary(Fn::Add, Operand{first}, Operand{shiftedMean});
    const int centred = b.binary(Fn::Sub, Operand{shifted}, Operand{shiftedMean});
    const int var = b.mean(b.binary(Fn::Mul, Operand{centred}, Operand{centred}), axes, true);
    return {mean, centred, b.unary(Fn::Rsqrt, b.binary(Fn::Add, Operand{var}, Operand{-1, eps}))};
  }

  // aten::topk(x, k, dim=-1, largest=True, sorted=True) -> (values, indices) (routing::topk). Equal values come out
  // first position first (PyTorch leaves their order unspecified); sorted=False gives the same sorted order (PyTorch's
  // order there is its own: a router using the result only through gathers and sums computes the same).
  std::vector<int> topk() {
    const int x = tensor(0);
    const int64_t k = integer(1);
    const int d = b.normDim(x, argc() > 2 ? integer(2) : -1);
    const int64_t n = b.shape(x)[static_cast<size_t>(d)];
    if (k < 1 || k > n) unsupported(fmt::format("k = {} of {} positions (kiln takes 1 <= k <= the dim's size)", k, n));
    if (n > (int64_t{1} << 24)) unsupported(fmt::format("topk over {} positions (kiln's is exact up to 2^24)", n));
    auto [values, indices] = routing::topk(b, x, k, d, argc() <= 3 || boolean(3));
    return {values, indices};
  }

  // aten::sort(x, dim=-1, descending=False) and sort.stable(x, *, stable, dim=-1, descending=False) -> (values,
  // indices), stable either way (routing::sort: O(n^2) per row).
  std::vector<int> sortValues() {
    const int x = tensor(0);
    const bool stableForm = argc() == 4;
    const int d = b.normDim(x, argc() > (stableForm ? 2u : 1u) ? integer(stableForm ? 2 : 1) : -1);
    const bool descending = argc() > (stableForm ? 3u : 2u) && boolean(stableForm ? 3 : 2);
    const int64_t n = b.shape(x)[static_cast<size_t>(d)];
    if (n > 4096) unsupported(fmt::format("sort of {} positions (kiln's compares every pair: at most 4096)", n));
    auto [values, indices] = routing::sort(b, x, d, descending);
    return {values, indices};
  }

  // aten::repeat_interleave(x, repeats, dim=None): each slice along dim repeated `repeats` times in place (x flattened
  // first without a dim): out[.., i, ..] = x[.., i floordiv repeats, ..], one IndexMap. repeats must be one count.
  int repeatInterleave() {
    int x = tensor(0);
    const torch::Value& r = value(1);
    int64_t repeats = 0;
    if (r.kind == torch::Value::Kind::Constant) repeats = integer(1);
    else if (r.kind == torch::Value::Kind::Weight && numel(r.shape) == 1) repeats = static_cast<int64_t>(r.weight->values.at(0));
    else unsupported("repeats given per slice (a tensor of counts); kiln takes one count for every slice");
    if (repeats < 1) unsupported(fmt::format("{} repeats (kiln takes 1 or more)", repeats));
    int d = 0;
    if (argc() > 2 && !isNone(2)) d = b.normDim(x, integer(2));
    else x = b.reshape(x, {numel(b.shape(x))});
    Shape shape = b.shape(x);
    shape[static_cast<size_t>(d)] *= repeats;
    std::vector<Idx> idx;
    for (int i = 0; i < b.rank(x); ++i) idx.push_back(i == d ? floorDiv(outVar(i), repeats) : outVar(i));
    return b.indexMap(x, shape, idx);
  }

  // slice_scatter(self, src, dim, start, end, step): self with its slice start:end along dim replaced by src (cast to
  // self's dtype): the slices of self before and after it and src, concatenated. The import makes it of an in-place
  // write through a slice; select_scatter(self, src, dim, index) is the slice index:index+1 of src given that axis.
  int sliceScatter() {
    const int self = tensor(0);
    const int d = b.normDim(self, argc() > 2 ? integer(2) : 0);
    const int64_t n = b.shape(self)[static_cast<size_t>(d)];
    auto bound = [&](int i, int64_t otherwise, int64_t low) {
      int64_t v = argc() > static_cast<size_t>(i) && !isNone(i) ? integer(i) : otherwise;
      if (v < 0) v += n;
      return std::clamp<int64_t>(v, low, n);
    };
    const int64_t start = bound(3, 0, 0), end = bound(4, n, start);
    const int64_t step = argc() > 5 && !isNone(5) ? integer(5) : 1;
    if (step < 1) unsupported(fmt::format("a step of {}", step));
    if (step == 1) return replaceRange(self, tensor(1), d, start, end);
    return replaceStrided(self, tensor(1), d, start, end, step);
  }
  // slice_scatter with a step: where(j in start:end:step, src[(j - start) / step], self[j]) along d, the positions a
  // constant and src read through a clamped IndexMap.
  int replaceStrided(int self, int src, int d, int64_t start, int64_t end, int64_t step) {
    const Shape s = b.shape(self);
    const int64_t n = s[static_cast<size_t>(d)], length = end > start ? (end - start + step - 1) / step : 0;
    Shape want = s;
    want[static_cast<size_t>(d)] = length;
    if (b.shape(src) != want)
      unsupported(fmt::format("a source of shape [{}] for a slice of shape [{}]", shapeString(b.shape(src)), shapeString(want)));
    if (length == 0) return self;
    if (b.dtype(src) != b.dtype(self)) src = b.cast(src, b.dtype(self));
    std::vector<Idx> idx;
    for (int k = 0; k < b.rank(self); ++k)
      idx.push_back(k == d ? idxMin(idxMax(floorDiv(idxAdd(outVar(k), -start), step), idxConst(0)), idxConst(length - 1))
                           : outVar(k));
    const int spread = b.indexMap(src, s, idx);
    std::vector<float> written(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) written[static_cast<size_t>(j)] = j >= start && j < end && (j - start) % step == 0;
    Shape along(s.size(), 1);
    along[static_cast<size_t>(d)] = n;
    const int mask = b.reshape(b.constant({n}, std::move(written), "slice_scatter positions"), along);
    return b.elementwise(Fn::Where, {Operand{mask}, Operand{spread}, Operand{self}});
  }
  int selectScatter() {
    const int self = tensor(0);
    const int d = b.normDim(self, integer(2));
    const int64_t n = b.shape(self)[static_cast<size_t>(d)];
    int64_t i = integer(3);
    if (i < 0) i += n;
    Shape one = b.shape(self);
    one[static_cast<size_t>(d)] = 1;
    return replaceRange(self, b.reshape(tensor(1), one), d, i, i + 1);
  }
  int replaceRange(int self, int src, int d, int64_t start, int64_t end) {
    Shape want = b.shape(self);
    const int64_t n = want[static_cast<size_t>(d)];
    want[static_cast<size_t>(d)] = end - start;
    if (b.shape(src) != want)
      unsupported(fmt::format("a source of shape [{}] for a slice of shape [{}]", shapeString(b.shape(src)), shapeString(want)));
    if (b.dtype(src) != b.dtype(self)) src = b.cast(src, b.dtype(self));
    std::vector<int> parts;
    if (start > 0) parts.push_back(b.slice(self, d, 0, 1, start));
    if (end > start) parts.push_back(src);
    if (end < n) parts.push_back(b.slice(self, d, end, 1, n - end));
    return parts.size() == 1 ? parts[0] : b.concat(parts, d);
  }

  // gather(self, dim, index): routing::gatherAlong; indices clamped into the tensor, where PyTorch fails on one out of
  // range.
  int gatherAlong() {
    const int self = tensor(0);
    const int d = b.normDim(self, integer(1));
    const int index = tensor(2);
    checkIndexAlong(self, d, index);
    if (numel(b.shape(self)) > (int64_t{1} << 24))
      unsupported(fmt::format("gather from {} elements (kiln's is exact up to 2^24)", numel(b.shape(self))));
    return routing::gatherAlong(b, self, d, index);
  }

  // gather's and scatter's index: of self's rank, no larger than self in the dims other than d.
  void checkIndexAlong(int self, int d, int index) const {
    const Shape& s = b.shape(self);
    const Shape& is = b.shape(index);
    if (is.size() != s.size()) unsupported("an index of another rank than the tensor's");
    for (size_t k = 0; k < s.size(); ++k)
      if (static_cast<int>(k) != d && is[k] > s[k]) unsupported(fmt::format("an index larger than the tensor in dim {}", k));
  }

  // scatter(self, dim, index, value or src) and its in-place form on a fresh result: routing::scatter.
  int scatter() {
    const int self = tensor(0);
    const int d = b.normDim(self, integer(1));
    const int index = tensor(2);
    checkIndexAlong(self, d, index);
    const Shape is = b.shape(index);  // a copy: operand() may add nodes
    if (argc() > 4 && !isNone(4)) unsupported("a reduce argument (kiln's scatter replaces; use scatter_reduce)");
    const Operand landed = operand(3);
    if (!landed.isImm())
      for (size_t k = 0; k < is.size(); ++k)
        if (b.shape(landed.node)[k] < is[k]) unsupported(fmt::format("a source smaller than the index in dim {}", k));
    return routing::scatter(b, self, d, index, landed.isImm() ? landed : Operand{-1, 0.f}, landed.isImm() ? -1 : landed.node);
  }

  // cumsum(x, dim, dtype=None): x converted to the result's dtype (an integer or bool x sums in i64, as PyTorch),
  // then routing::cumsum.
  int cumulativeSum() {
    int x = tensor(0);
    const int d = b.normDim(x, integer(1));
    if (b.shape(x)[static_cast<size_t>(d)] > 4096)
      unsupported(fmt::format("cumsum over {} positions (kiln sums every prefix apart: at most 4096)", b.shape(x)[static_cast<size_t>(d)]));
    if (b.dtype(x) != resultType()) x = b.cast(x, resultType());
    return routing::cumsum(b, x, d);
  }

  // histc(x, bins=100, min=0, max=0) of a floating x: routing::histc.
  int histogram() {
    const int x = tensor(0);
    const int64_t bins = argc() > 1 ? integer(1) : 100;
    const double lo = argc() > 2 ? number(2) : 0.0, hi = argc() > 3 ? number(3) : 0.0;
    if (lo > hi) unsupported(fmt::format("min {} > max {}", lo, hi));
    if (bins < 1 || numel(b.shape(x)) * bins > (int64_t{1} << 26))
      unsupported(fmt::format("{} bins of {} elements (kiln compares each element with each bin: at most 2^26 pairs)", bins,
                              numel(b.shape(x))));
    return routing::histc(b, x, bins, static_cast<float>(lo), static_cast<float>(hi));
  }

  // floor_divide(a, b) of integer tensors (b a tensor or a nonzero integer constant): routing::floorDivide.
  int floorDivide() {
    const int a = tensor(0);
    const Operand divisor = operand(1);
    const bool integral = divisor.isImm() ? divisor.imm == std::trunc(divisor.imm) && divisor.imm != 0.f
                                          : b.dtype(divisor.node) == DType::I64;
    if (b.dtype(a) != DType::I64 || !integral || resultType() != DType::I64)
      unsupported("floor_divide of floating values (kiln takes integer tensors, divided by an integer tensor or a "
                  "nonzero integer); write torch.floor(a / b)");
    return routing::floorDivide(b, a, divisor);
  }

  // _grouped_mm(input [S, K], weight [E, K, N], offs [E]): routing::groupedProduct (bias and out_dtype not taken).
  int groupedMm() {
    const int input = tensor(0), weight = tensor(1);
    if (argc() < 3 || isNone(2)) unsupported("a grouped product without offsets");
    const int offsets = tensor(2);
    for (int i = 3; i < static_cast<int>(argc()); ++i)
      if (!isNone(i)) unsupported("a bias or out_dtype argument");
    const Shape si = b.shape(input), sw = b.shape(weight), so = b.shape(offsets);
    if (si.size() != 2 || sw.size() != 3 || so.size() != 1 || so[0] != sw[0] || si[1] != sw[1])
      unsupported(fmt::format("operands [{}] x [{}] with offsets [{}] (kiln takes [S, K] x [E, K, N] with [E])",
                              shapeString(si), shapeString(sw), shapeString(so)));
    return routing::groupedProduct(b, input, weight, offsets);
  }

  // aten::max / aten::min: of every element (one result); of two tensors, elementwise (torch.maximum / minimum, NaN
  // propagating); along a dim, (values, indices), the indices argmax's (of -x for min: the first extreme, NaN counting
  // as it, as PyTorch).
  std::vector<int> extremes() {
    const bool max = cur->op == "aten::max";
    const int x = tensor(0);
    const int keys = max ? x : b.unary(Fn::Neg, x);
    if (argc() == 1) {
      std::vector<int> all(static_cast<size_t>(b.rank(x)));
      std::iota(all.begin(), all.end(), 0);
      const int m = b.reduce(ReduceFn::Max, keys, all, false);
      return {max ? m : b.unary(Fn::Neg, m)};
    }
    if (value(1).isTensor()) return {b.binary(max ? Fn::Max : Fn::Min, Operand{x}, operand(1))};
    const int d = b.normDim(x, integer(1));
    const bool keep = argc() > 2 && boolean(2);
    const int m = b.reduce(ReduceFn::Max, keys, {d}, keep);
    return {max ? m : b.unary(Fn::Neg, m), firstMaximum(keys, d, keep)};
  }

  // Every result of the current node: native_layer_norm's three, topk's two, otherwise the one lower() makes.
  std::vector<int> lowerResults() {
    if (cur->op == "aten::native_layer_norm") return layerNormParts();
    if (cur->op == "aten::topk") return topk();
    if (cur->op == "aten::sort") return sortValues();
    if (cur->op == "aten::max" || cur->op == "aten::min") return extremes();
    if (cur->outputs.size() != 1) unsupported("ops with several results are not supported");
    return {lower()};
  }

  // PyTorch lets dimension 0 or -1 name a 0-d tensor's one element. An op taking a dimension of a 0-d operand is
  // lowered on its 0-d operands viewed as [1] and its results reshaped back to LibTorch's shapes (of as many elements).
  static bool takesDimensions(const std::string& op) {
    static const std::set<std::string> ops = {"aten::sum",     "aten::mean",      "aten::amax",         "aten::argmax",
                                              "aten::softmax", "aten::squeeze",   "aten::transpose",    "aten::index_select",
                                              "aten::index_copy",  "aten::topk",      "aten::repeat_interleave",
                                              "aten::gather",      "aten::scatter",   "aten::slice_scatter", "aten::select_scatter",
                                              "aten::max",         "aten::min",       "aten::sort",         "aten::cumsum"};
    return ops.count(op) > 0;
  }
  std::vector<int> lowerNode() {
    std::map<int, int> zeroD;  // torch value -> its own 0-d node, while the node sees it as [1]
    if (takesDimensions(cur->op))
      for (int vid : cur->inputs)
        if (auto it = nodeOf.find(vid); it != nodeOf.end() && b.rank(it->second) == 0 && !zeroD.count(vid)) {
          zeroD[vid] = it->second;
          it->second = b.reshape(it->second, {1});
        }
    std::vector<int> results = lowerResults();
    for (const auto& [vid, node] : zeroD) nodeOf[vid] = node;
    for (size_t k = 0; k < results.size() && !zeroD.empty(); ++k) {
      const Shape& want = tg.values[cur->outputs[k]].shape;
      if (g.nodes[results[k]].shape != want && numel(g.nodes[results[k]].shape) == numel(want))
        results[k] = b.reshape(results[k], want);
    }
    return results;
  }

  // index_select(x, dim, index): the rows `index` (1-D, or 0-D as one row) of x along dim, as a gather from x viewed as
  // [x.size(dim), everything else] (dim moved first and back again).
  int indexSelect() {
    int x = tensor(0);
    const int d = b.normDim(x, integer(1));
    int index = tensor(2);
    if (b.rank(index) > 1) unsupported("index_select with an index of more than one dimension");
    if (b.rank(index) == 0) index = b.reshape(index, {1});
    const Shape s = b.shape(x);
    std::vector<int> toFront{d};
    for (int i = 0; i < b.rank(x); ++i)
      if (i != d) toFront.push_back(i);
    int moved = d == 0 ? x : b.permute(x, toFront);
    Shape movedShape = b.shape(moved);
    int64_t rest = 1;
    for (size_t i = 1; i < movedShape.size(); ++i) rest *= movedShape[i];
    int rows = b.gather(b.reshape(moved, {s[static_cast<size_t>(d)], rest}), index);
    movedShape[0] = b.shape(index)[0];
    int picked = b.reshape(rows, movedShape);
    if (d == 0) return picked;
    std::vector<int> back(toFront.size());
    for (size_t i = 0; i < toFront.size(); ++i) back[static_cast<size_t>(toFront[i])] = static_cast<int>(i);
    return b.permute(picked, back);
  }

  // clamp(x, min, max) = min(max(x, min), max), either bound None; clamp_min / clamp_max take one.
  int clamp(bool low, bool high) {
    int x = tensor(0);
    int y = x;
    int at = 1;
    if (low) {
      if (!isNone(at)) y = b.binary(Fn::Max, Operand{y}, operand(at));
      ++at;
    }
    if (high && !isNone(at)) y = b.binary(Fn::Min, Operand{y}, operand(at));
    return y;  // clamp(x, None, None) is x itself
  }

  // addmm(c, a, b, beta, alpha) = beta * c + alpha * (a @ b); baddbmm likewise with batched products.
  int addmm() {
    int product = b.matmul(tensor(1), tensor(2));
    double beta = argc() > 3 && !isNone(3) ? number(3) : 1.0, alpha = argc() > 4 && !isNone(4) ? number(4) : 1.0;
    if (resultType() == DType::I64) {  // integer products take their scalars as integers, truncated (as PyTorch)
      beta = std::trunc(beta);
      alpha = std::trunc(alpha);
    }
    if (alpha != 1.0) product = b.binary(Fn::Mul, Operand{product}, Operand{-1, static_cast<float>(alpha)});
    if (beta == 0.0) return product;
    Operand c = operand(0);
    if (beta != 1.0) c = c.isImm() ? Operand{-1, c.imm * static_cast<float>(beta)}
                                   : Operand{b.binary(Fn::Mul, c, Operand{-1, static_cast<float>(beta)})};
    return b.binary(Fn::Add, Operand{product}, c);
  }

  int sdpa() {
    int q = tensor(0), k = tensor(1), v = tensor(2);
    if (argc() > 4 && !isNone(4) && number(4) != 0.0) unsupported("dropout must be 0 at inference");
    bool causal = argc() > 5 && boolean(5);
    int64_t e = b.shape(q).back();
    float scale = argc() > 6 && !isNone(6) ? static_cast<float>(number(6)) : 1.f / std::sqrt(static_cast<float>(e));
    // Grouped-query attention: each group of query heads reads one key/value head.
    if (b.rank(q) >= 3 && b.shape(k)[b.rank(k) - 3] != b.shape(q)[b.rank(q) - 3]) {
      int hq = static_cast<int>(b.shape(q)[b.rank(q) - 3]), hk = static_cast<int>(b.shape(k)[b.rank(k) - 3]);
      if (hq % hk != 0) unsupported(fmt::format("{} query heads do not divide into {} key/value heads", hq, hk));
      auto repeat = [&](int x) {
        Shape s = b.shape(x);
        int hd = static_cast<int>(s.size()) - 3;
        s[hd] = hq;
        std::vector<Idx> idx;
        for (int d = 0; d < static_cast<int>(s.size()); ++d) idx.push_back(d == hd ? floorDiv(outVar(d), hq / hk) : outVar(d));
        return b.indexMap(x, s, idx);
      };
      k = repeat(k);
      v = repeat(v);
    }
    int mask = argc() > 3 && !isNone(3) ? tensor(3) : -1;
    return b.attention(q, k, v, mask, causal, scale);
  }

  int squeeze() {
    int x = tensor(0);
    Shape s;
    const bool every = argc() < 2 || isNone(1);  // squeeze(x); squeeze(x, dim=()) squeezes nothing
    std::vector<int> ds;
    if (!every) ds = dims(x, 1);
    for (int d = 0; d < b.rank(x); ++d) {
      bool listed = every || std::find(ds.begin(), ds.end(), d) != ds.end();
      if (!(listed && b.shape(x)[d] == 1)) s.push_back(b.shape(x)[d]);
    }
    return b.reshape(x, s);
  }

  int add() { return addScaled(Fn::Add); }
  int subtract() { return addScaled(Fn::Sub); }
  int reverseSubtract() {  // rsub(x, other, alpha) = other - alpha * x
    Operand x{tensor(0)};
    if (argc() > 2 && !isNone(2) && number(2) != 1.0) x = Operand{b.binary(Fn::Mul, x, Operand{-1, static_cast<float>(number(2))})};
    return b.binary(Fn::Sub, operand(1), x);
  }
  // bitwise_not / bitwise_and / & are the logical ones on bool tensors; kiln has no integer bit operations.
  void checkBoolOperands() {
    for (size_t i = 0; i < cur->inputs.size() && i < 2; ++i) {
      const torch::Value& v = tg.values[cur->inputs[i]];
      if (v.kind != torch::Value::Kind::Constant && v.dtype != DType::Bool)
        unsupported(fmt::format("bit operations on {} tensors are not supported (only on bool tensors, where they are the "
                                "logical ones)", dtypeName(v.dtype)));
    }
  }
  int multiply() { return b.binary(Fn::Mul, operand(0), operand(1)); }

  int divide() {
    if (argc() > 2 && !isNone(2)) unsupported("rounding modes are not supported");
    return b.binary(Fn::Div, operand(0), operand(1));
  }

  int power() {
    if (!operand(1).isImm()) unsupported("only a scalar exponent is supported");
    return b.binary(Fn::Pow, Operand{tensor(0)}, operand(1));
  }

  int gelu() {
    bool tanhForm = argc() > 1 && std::get<std::string>(value(1).constant) == "tanh";
    return b.unary(tanhForm ? Fn::GeluTanh : Fn::Gelu, tensor(0));
  }

  // sum, mean and amax.
  int reduction() {
    const std::string& op = cur->op;
    int x = tensor(0);
    // aten::sum(x, dtype) reduces every dim; the .dim overloads take a dim list (empty or None: every dim).
    bool hasDims = argc() > 2 && std::holds_alternative<std::vector<int64_t>>(value(1).constant);
    std::vector<int> axes;
    if (hasDims) axes = dims(x, 1);
    if (axes.empty())
      for (int d = 0; d < b.rank(x); ++d) axes.push_back(d);
    bool keep = hasDims && boolean(2);
    // A sum or mean in another dtype (of bool: i64; or its dtype argument) converts x first, as PyTorch does: a sum
    // of bools kept bool would count to 1 at most.
    if (op != "aten::amax" && b.dtype(x) != resultType()) x = b.cast(x, resultType());
    if (op == "aten::mean") return b.mean(x, axes, keep);
    return b.reduce(op == "aten::sum" ? ReduceFn::Sum : ReduceFn::Max, x, axes, keep);
  }

  int layerNorm() { return layerNormParts()[0]; }
  int clampBoth() { return clamp(true, true); }
  int clampMin() { return clamp(true, false); }
  int clampMax() { return clamp(false, true); }
  int linear() { return b.linear(tensor(0), tensor(1), isNone(2) ? -1 : tensor(2)); }
  int matmul() { return b.matmul(tensor(0), tensor(1)); }

  int transpose() {
    int x = tensor(0);
    return b.transpose(x, b.normDim(x, integer(1)), b.normDim(x, integer(2)));
  }

  int transposeMatrix() { return b.rank(tensor(0)) < 2 ? tensor(0) : b.transpose(tensor(0), 0, 1); }

  int permute() {
    int x = tensor(0);
    return b.permute(x, dims(x, 1));
  }

  int reshape() { return b.reshape(tensor(0), resultShape()); }
  int expand() { return b.broadcastTo(tensor(0), resultShape()); }
  int passThrough() { return tensor(0); }
  // aten::dropout(x, p, train): the identity at inference (train false, or p 0); with train true it zeroes a random
  // part of x, which a compiled inference graph cannot reproduce.
  int dropout() {
    if (argc() > 2 && boolean(2) && number(1) != 0.0)
      unsupported(fmt::format("dropout with training=True (p = {}) is random; put the model in eval mode (model.eval()) "
                              "before tracing", number(1)));
    return tensor(0);
  }
  int cast() { return b.cast(tensor(0), resultType()); }
  int embedding() { return b.gather(tensor(0), tensor(1)); }

  // Parts empty along the dim add nothing (Phi-3's full rotary cats q_rot with an empty q_pass): dropped here, so
  // no zero-extent kernel is ever made for them (the slices that made them become dead code).
  // As LibTorch's cat, parts of shape [0] (the legacy empty tensor, `torch.tensor([])`, whatever the other parts' rank)
  // are skipped before the dim is read: transformers' DynamicCache starts every layer's keys and values as one, and a
  // model traced with its default use_cache=True concatenates onto it (the cache is dead code when only the logits
  // are returned).
  int concat() {
    std::vector<int> given;
    for (size_t i = 0; i + 1 < argc(); ++i) {
      int part = tensor(static_cast<int>(i));
      if (b.shape(part) != Shape{0} || argc() == 2) given.push_back(part);
    }
    if (given.empty()) unsupported("every part of the concatenation is empty");
    const int d = b.normDim(given[0], integer(static_cast<int>(argc()) - 1));
    std::vector<int> parts;
    for (int part : given)
      if (b.shape(part)[d] != 0) parts.push_back(part);
    if (parts.empty()) unsupported("every part of the concatenation is empty");
    return parts.size() == 1 ? parts[0] : b.concat(parts, d);
  }

  // aten::stack(tensors, dim): every part (all of one shape) given an axis of one at dim (of rank + 1, negative from
  // the end), then concatenated along it.
  int stack() {
    const int first = tensor(0);
    const int64_t rank = b.rank(first) + 1, given = integer(static_cast<int>(argc()) - 1);
    const int64_t d = given < 0 ? given + rank : given;
    if (d < 0 || d >= rank)
      unsupported(fmt::format("dim {} is out of range for stacking tensors of rank {} (from {} to {})", given, rank - 1, -rank,
                              rank - 1));
    std::vector<int> parts;
    for (size_t i = 0; i + 1 < argc(); ++i) {
      const int part = tensor(static_cast<int>(i));
      if (b.shape(part) != b.shape(first)) unsupported("stacked tensors of different shapes");
      Shape shape = b.shape(part);
      shape.insert(shape.begin() + d, 1);
      parts.push_back(b.reshape(part, shape));
    }
    return parts.size() == 1 ? parts[0] : b.concat(parts, static_cast<int>(d));
  }

  int slice() {
    int x = tensor(0);
    int d = b.normDim(x, argc() > 1 ? integer(1) : 0);
    int64_t size = b.shape(x)[d];
    int64_t start = argc() > 2 && !isNone(2) ? integer(2) : 0;
    if (start < 0) start = std::max<int64_t>(0, start + size);
    start = std::min(start, size);
    int64_t step = argc() > 4 ? integer(4) : 1;
    return b.slice(x, d, start, step, resultShape()[d]);
  }

  int select() {
    int x = tensor(0);
    int d = b.normDim(x, integer(1));
    int64_t i = integer(2);
    if (i < 0) i += b.shape(x)[d];
    return b.reshape(b.slice(x, d, i, 1, 1), resultShape());
  }

  // aten::copy(self, src): src broadcast to self's shape in self's dtype (the functional form of copy_, which the
  // import makes of a write to the model's state).
  int copy() {
    int self = tensor(0);
    return b.cast(b.broadcastTo(tensor(1), b.shape(self)), b.dtype(self));
  }

  // aten::index_copy(self, dim, index, source): self with its slices index[t] along dim replaced by source's slice t.
  // Written with the Tensor primitives, exact in every dtype. The positions along dim are an i64 arange, so that
  // loop-index-comparisons makes each comparison with the index a choice on indices. One slice (a decoder step's
  // cache write): where(j == index[0], source, self). Several: a one-hot product, hit[j, t] = (j == index[t]),
  // replaced = hit x source along dim, and where(any t hits j, replaced, self). An index out of range replaces nothing
  // (LibTorch fails), a repeated one sums its sources (LibTorch leaves the order undefined). Either way the kernel
  // reads and writes all of self (a static KV cache rewritten at every step), not only the slices written.
  int indexCopy() {
    int self = tensor(0);
    const int d = b.normDim(self, integer(1));
    int index = tensor(2);
    int source = tensor(3);
    if (b.rank(index) > 1) unsupported("index_copy with an index of more than one dimension");
    if (b.rank(index) == 0) index = b.reshape(index, {1});
    const Shape s = b.shape(self);
    const int64_t count = b.shape(index)[0];
    Shape expected = s;
    expected[static_cast<size_t>(d)] = count;
    if (b.shape(source) != expected)
      unsupported(fmt::format("source of shape [{}] for {} slices of [{}] along dim {}", shapeString(b.shape(source)), count,
                              shapeString(s), d));
    return copySlices(self, d, index, source, false);
  }

  // index_put(self, [index], values, accumulate) with one integer index tensor (1-D or 0-D) for dim 0, and its in-place
  // form on a fresh result (transformers' grouped_mm experts invert their sort by `inv[perm] = arange(S)`): values
  // broadcast to the written slices' shape; without accumulate as index_copy (a repeated index sums its values, where
  // PyTorch leaves the result undefined), with accumulate self plus every value landing on the slice. Negative indices
  // wrap; others out of range write nothing (PyTorch fails).
  int indexPut() {
    if (argc() != 4 || isNone(1))
      unsupported("an index list of more than one tensor, or with None (kiln takes x[idx] = v, one integer index tensor)");
    const int self = tensor(0);
    int index = tensor(1);
    if (b.dtype(index) == DType::Bool) unsupported("a boolean mask index (use torch.where(mask, v, x))");
    if (b.rank(index) > 1) unsupported("an index of more than one dimension");
    if (b.rank(index) == 0) index = b.reshape(index, {1});
    index = routing::wrapped(b, index, b.shape(self)[0]);
    Shape slices = b.shape(self);
    slices[0] = b.shape(index)[0];
    return copySlices(self, 0, index, b.broadcastTo(tensor(2), slices), boolean(3));
  }

  // self with its slices index[t] along d replaced by source's slice t, or (accumulate) increased by it.
  int copySlices(int self, int d, int index, int source, bool accumulate) {
    const Shape s = b.shape(self);
    const int64_t n = s[static_cast<size_t>(d)], count = b.shape(index)[0];
    std::vector<float> positions(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) positions[static_cast<size_t>(j)] = static_cast<float>(j);
    const int iota = b.constant({n}, std::move(positions), "index_copy positions", DType::I64);
    if (count == 1 && !accumulate) return indexCopyOne(self, d, iota, index, source);
    int hit = b.binary(Fn::Eq, Operand{b.reshape(iota, {n, 1})}, Operand{b.reshape(index, {1, count})});  // [n, count]
    // source with dim moved next to last ([.., count, inner]); a last dim gets a unit inner dim.
    const int r = b.rank(self);
    std::vector<int> perm;
    for (int i = 0; i < r; ++i)
      if (i != d && i != r - 1) perm.push_back(i);
    perm.push_back(d);
    if (d != r - 1) perm.push_back(r - 1);
    int moved = b.permute(source, perm);
    if (d == r - 1) {
      Shape withInner = b.shape(moved);
      withInner.push_back(1);
      moved = b.reshape(moved, withInner);
    }
    int replaced = b.matmul(b.cast(hit, b.dtype(source)), moved);  // [.., n, inner]
    if (d == r - 1) replaced = b.reshape(replaced, Shape(b.shape(replaced).begin(), b.shape(replaced).end() - 1));
    std::vector<int> back(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) back[static_cast<size_t>(perm[i])] = static_cast<int>(i);
    replaced = b.permute(replaced, back);
    if (accumulate) return b.binary(Fn::Add, Operand{self}, Operand{b.cast(replaced, b.dtype(self))});
    Shape maskShape(static_cast<size_t>(r), 1);
    maskShape[static_cast<size_t>(d)] = n;
    int written = b.reshape(b.reduce(ReduceFn::Max, b.cast(hit, DType::F32), {1}, false), maskShape);
    return b.elementwise(Fn::Where, {Operand{written}, Operand{b.cast(replaced, b.dtype(self))}, Operand{self}});
  }

  // index_copy of one slice: where(j == index[0], source, self), j self's position along dim (the arange `iota`).
  int indexCopyOne(int self, int d, int iota, int index, int source) {
    const Shape s = b.shape(self);
    Shape along(s.size(), 1);
    along[static_cast<size_t>(d)] = s[static_cast<size_t>(d)];
    const int hit = b.binary(Fn::Eq, Operand{b.reshape(iota, along)}, Operand{b.reshape(index, Shape(s.size(), 1))});
    return b.elementwise(Fn::Where, {Operand{hit}, Operand{b.cast(source, b.dtype(self))}, Operand{self}});
  }

  // aten::argmax(x, dim=None, keepdim=False): the first index of the maximum along dim (over the flattened x without
  // one), NaN counting as the maximum, as torch.argmax. With m the maximum (NaN where the row holds one: kiln's max
  // propagates NaN), the positions j where x is m or NaN score n - j and the others 0, all in f32; the first such j is
  // n minus the largest score. Exact for rows of up to 2^24 positions.
  int argmax() {
    int x = tensor(0);
    const bool hasDim = argc() > 1 && !isNone(1);
    int d = 0;
    if (hasDim) {
      d = b.normDim(x, integer(1));
    } else {
      x = b.reshape(x, {numel(b.shape(x))});
    }
    return firstMaximum(x, d, hasDim && argc() > 2 && boolean(2));
  }
  int firstMaximum(int x, int d, bool keep) {
    const int64_t n = b.shape(x)[static_cast<size_t>(d)];
    if (n > (int64_t{1} << 24)) unsupported(fmt::format("argmax over {} positions (kiln's is exact up to 2^24)", n));
    return routing::firstMaximum(b, x, d, keep);
  }

  int maximum() { return b.binary(Fn::Max, operand(0), operand(1)); }  // torch.maximum / minimum: NaN propagates
  int minimum() { return b.binary(Fn::Min, operand(0), operand(1)); }

  int maskedFill() { return b.elementwise(Fn::Where, {Operand{tensor(1)}, operand(2), Operand{tensor(0)}}); }
  int where() { return b.elementwise(Fn::Where, {Operand{tensor(0)}, operand(1), operand(2)}); }

  // The lowering of each op that is not a plain unary function or comparison.
  using OpLowering = int (Lowering::*)();
  static const std::map<std::string, OpLowering>& opLowerings() {
    static const std::map<std::string, OpLowering> table = {
        {"aten::add", &Lowering::add},
        {"aten::argmax", &Lowering::argmax},
        {"aten::sub", &Lowering::subtract},
        {"aten::rsub", &Lowering::reverseSubtract},
        {"aten::mul", &Lowering::multiply},
        {"aten::div", &Lowering::divide},
        {"aten::pow", &Lowering::power},
        {"aten::gelu", &Lowering::gelu},
        {"aten::sum", &Lowering::reduction},
        {"aten::mean", &Lowering::reduction},
        {"aten::amax", &Lowering::reduction},
        {"aten::softmax", &Lowering::softmax},
        {"aten::rms_norm", &Lowering::rmsNorm},
        {"aten::layer_norm", &Lowering::layerNorm},
        {"aten::clamp", &Lowering::clampBoth},
        {"aten::clip", &Lowering::clampBoth},
        {"aten::clamp_min", &Lowering::clampMin},
        {"aten::clamp_max", &Lowering::clampMax},
        {"aten::addmm", &Lowering::addmm},
        {"aten::baddbmm", &Lowering::addmm},
        {"aten::linear", &Lowering::linear},
        {"aten::matmul", &Lowering::matmul},
        {"aten::mm", &Lowering::matmul},
        {"aten::bmm", &Lowering::matmul},
        {"aten::transpose", &Lowering::transpose},
        {"aten::t", &Lowering::transposeMatrix},
        {"aten::permute", &Lowering::permute},
        {"aten::view", &Lowering::reshape},
        {"aten::reshape", &Lowering::reshape},
        {"aten::unsqueeze", &Lowering::reshape},
        {"aten::flatten", &Lowering::reshape},
        {"aten::squeeze", &Lowering::squeeze},
        {"aten::expand", &Lowering::expand},
        {"aten::expand_as", &Lowering::expand},
        {"aten::contiguous", &Lowering::passThrough},
        {"aten::clone", &Lowering::passThrough},
        {"aten::detach", &Lowering::passThrough},
        {"aten::to", &Lowering::cast},
        {"aten::type_as", &Lowering::cast},
        {"aten::dropout", &Lowering::dropout},
        {"aten::alias", &Lowering::passThrough},
        {"aten::embedding", &Lowering::embedding},
        {"aten::index_select", &Lowering::indexSelect},
        {"aten::repeat_interleave", &Lowering::repeatInterleave},
        {"aten::gather", &Lowering::gatherAlong},
        {"aten::cumsum", &Lowering::cumulativeSum},
        {"aten::histc", &Lowering::histogram},
        {"aten::floor_divide", &Lowering::floorDivide},
        {"aten::_grouped_mm", &Lowering::groupedMm},
        {"aten::index_put", &Lowering::indexPut},
        {"aten::maximum", &Lowering::maximum},
        {"aten::minimum", &Lowering::minimum},
        {"aten::scatter", &Lowering::scatter},
        {"aten::slice_scatter", &Lowering::sliceScatter},
        {"aten::select_scatter", &Lowering::selectScatter},
        {"aten::cat", &Lowering::concat},
        {"aten::concat", &Lowering::concat},
        {"aten::stack", &Lowering::stack},
        {"aten::slice", &Lowering::slice},
        {"aten::select", &Lowering::select},
        {"aten::masked_fill", &Lowering::maskedFill},
        {"aten::where", &Lowering::where},
        {"aten::copy", &Lowering::copy},
        {"aten::index_copy", &Lowering::indexCopy},
        {"aten::scaled_dot_product_attention", &Lowering::sdpa},
    };
    return table;
  }

  // The ops that are one function of one tensor, and those of two operands (comparisons and logical and).
  static const std::map<std::string, Fn>& unaryFunctions() {
    static const std::map<std::string, Fn> table = {
        {"aten::neg", Fn::Neg},         {"aten::exp", Fn::Exp},   {"aten::rsqrt", Fn::Rsqrt},
        {"aten::sqrt", Fn::Sqrt},       {"aten::relu", Fn::Relu}, {"aten::silu", Fn::Silu},
        {"aten::sigmoid", Fn::Sigmoid}, {"aten::tanh", Fn::Tanh}, {"aten::cos", Fn::Cos},
        {"aten::sin", Fn::Sin},         {"aten::logical_not", Fn::Not}, {"aten::bitwise_not", Fn::Not},
        {"aten::abs", Fn::Abs}};
    return table;
  }
  static const std::map<std::string, Fn>& comparisons() {
    static const std::map<std::string, Fn> table = {
        {"aten::lt", Fn::Lt}, {"aten::le", Fn::Le}, {"aten::gt", Fn::Gt}, {"aten::ge", Fn::Ge}, {"aten::eq", Fn::Eq},
        {"aten::ne", Fn::Ne}, {"aten::__and__", Fn::And}, {"aten::logical_and", Fn::And}, {"aten::bitwise_and", Fn::And}};
    return table;
  }

  int lower() {
    const std::string& op = cur->op;
    if (op == "aten::bitwise_not" || op == "aten::bitwise_and" || op == "aten::__and__") checkBoolOperands();
    if (auto it = comparisons().find(op); it != comparisons().end()) return b.binary(it->second, operand(0), operand(1));
    if (auto it = unaryFunctions().find(op); it != unaryFunctions().end()) return b.unary(it->second, tensor(0));
    if (auto it = opLowerings().find(op); it != opLowerings().end()) return (this->*it->second)();
    unsupported("unsupported op");
  }
};

}  // namespace

std::vector<std::string> supportedOps() {
  std::vector<std::string> names;
  for (const OpEntry& op : opCatalog()) names.push_back(op.name);
  return names;
}

std::vector<std::string> loweredOps() {
  // (lowerResults: the ops of several results)
  std::vector<std::string> names{"aten::native_layer_norm", "aten::topk", "aten::sort", "aten::max", "aten::min"};
  for (const auto& table : {Lowering::unaryFunctions(), Lowering::comparisons()})
    for (const auto& [name, fn] : table) names.push_back(name);
  for (const auto& [name, lowering] : Lowering::opLowerings()) names.push_back(name);
  return names;
}

Graph lowerFromTorch(const torch::Graph& tg) {
  Graph g;
  g.modelName = tg.modelName;
  Lowering l{tg, g, Builder(g)};
  for (int vid : tg.inputs) {
    const torch::Value& v = tg.values[vid];
    Node n{Node::Kind::Input};
    n.dtype = v.dtype;
    n.shape = v.shape;
    n.name = v.name;
    int id = g.add(std::move(n));
    g.inputs.push_back(id);
    l.nodeOf[vid] = id;
  }
  for (const torch::Node& n : tg.nodes) {
    l.cur = &n;
    l.b.setOrigin(n.op + " @ " + n.loc.str());
    std::vector<int> results = l.lowerNode();
    KILN_ASSERT(results.size() == n.outputs.size(), "{}: {} results lowered for {} outputs", l.where(), results.size(), n.outputs.size());
    for (size_t k = 0; k < results.size(); ++k) {
      int out = results[k];
      const torch::Value& want = tg.values[n.outputs[k]];
      if (g.nodes[out].shape != want.shape)
        internalError(__FILE__, __LINE__,
                      fmt::format("{} lowered result {} to shape [{}], LibTorch computed [{}]", l.where(), k,
                                  shapeString(g.nodes[out].shape), shapeString(want.shape)));
      if (g.nodes[out].dtype != want.dtype) out = l.b.cast(out, want.dtype);
      l.nodeOf[n.outputs[k]] = out;
      if (g.nodes[out].traced.empty() && g.nodes[out].kind != Node::Kind::Input && g.nodes[out].kind != Node::Kind::Weight)
        g.nodes[out].traced = want.traced;
    }
  }
  for (int vid : tg.outputs) {
    auto it = l.nodeOf.find(vid);
    if (it == l.nodeOf.end()) userError("model output is a constant; kiln compiles outputs computed from inputs");
    g.outputs.push_back(it->second);
  }
  return g;
}

}  // namespace kiln::tensor
