// Decompositions of the routing ops (routing.h).
#include "routing.h"

#include <limits>
#include <vector>

namespace kiln::tensor::routing {
namespace {

Operand imm(float v) { return Operand{-1, v}; }
int where(Builder& b, int c, Operand yes, Operand no) { return b.elementwise(Fn::Where, {Operand{c}, yes, no}); }

// x broadcast over a new last axis of n entries: [p, t] = x[p].
int overNewAxis(Builder& b, int x, int64_t n) {
  Shape wide = b.shape(x);
  wide.push_back(n);
  std::vector<Idx> idx;
  for (int k = 0; k < b.rank(x); ++k) idx.push_back(outVar(k));
  return b.indexMap(x, wide, idx);
}

// x's dim d moved onto a new last axis, d itself ranging over `extent` positions: [p, t] = x[p with p_d = t].
int alongNewAxis(Builder& b, int x, int d, int64_t extent) {
  const int r = b.rank(x);
  Shape wide = b.shape(x);
  wide.push_back(wide[static_cast<size_t>(d)]);
  wide[static_cast<size_t>(d)] = extent;
  std::vector<Idx> idx;
  for (int k = 0; k < r; ++k) idx.push_back(k == d ? outVar(r) : outVar(k));
  return b.indexMap(x, wide, idx);
}

// A constant of `rank` dims, 1 except `axis` (n entries): value(i) at position i along it.
template <typename F>
int alongAxis(Builder& b, int64_t n, int axis, int rank, const char* name, F value, DType dtype = DType::F32) {
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = value(i);
  Shape s(static_cast<size_t>(rank), 1);
  s[static_cast<size_t>(axis)] = n;
  return b.constant(s, std::move(values), name, dtype);
}

// A constant over dim d (n entries, the row q) and a new last axis (n entries, t), 1 elsewhere: pick(q, t) as 0 or 1.
template <typename F>
int squareMask(Builder& b, int64_t n, int d, int rank, const char* name, F pick) {
  std::vector<float> values(static_cast<size_t>(n * n));
  for (int64_t q = 0; q < n; ++q)
    for (int64_t t = 0; t < n; ++t) values[static_cast<size_t>(q * n + t)] = pick(q, t) ? 1.f : 0.f;
  Shape s(static_cast<size_t>(rank + 1), 1);
  s[static_cast<size_t>(d)] = n;
  s[static_cast<size_t>(rank)] = n;
  return b.constant(s, std::move(values), name);
}

}  // namespace

int firstMaximum(Builder& b, int x, int d, bool keepdim) {
  // With m the maximum (NaN where the row holds one: kiln's max propagates NaN), the positions j where x is m or NaN
  // score n - j and the others 0, all in f32; the first such j is n minus the largest score.
  const int64_t n = b.shape(x)[static_cast<size_t>(d)];
  const int score = alongAxis(b, n, d, b.rank(x), "argmax positions", [&](int64_t j) { return static_cast<float>(n - j); });
  const int m = b.reduce(ReduceFn::Max, x, {d}, true);
  const int equal = b.binary(Fn::Eq, Operand{x}, Operand{m});
  const int nan = b.binary(Fn::Ne, Operand{x}, Operand{x});
  const int picked = where(b, nan, Operand{score}, Operand{where(b, equal, Operand{score}, imm(0.f))});
  const int best = b.reduce(ReduceFn::Max, picked, {d}, keepdim);
  return b.cast(b.binary(Fn::Sub, imm(static_cast<float>(n)), Operand{best}), DType::I64);
}

std::pair<int, int> topk(Builder& b, int x, int64_t k, int d, bool largest) {
  // k rounds of argmax's rule over the positions not yet taken (of the keys -x for the smallest). With largest, round i
  // takes m, the maximum of the keys where the taken positions count as -inf (NaN where an open position holds one),
  // and the first open position where the key is m, or NaN when m is; without largest, the NaN come last, once no
  // number is open.
  const int64_t n = b.shape(x)[static_cast<size_t>(d)];
  const int keys = largest ? x : b.unary(Fn::Neg, x);
  const int score = alongAxis(b, n, d, b.rank(x), "topk positions", [&](int64_t j) { return static_cast<float>(n - j); });
  const int nan = b.binary(Fn::Ne, Operand{keys}, Operand{keys});
  const float negInf = -std::numeric_limits<float>::infinity();
  int taken = -1;  // bool: the positions earlier rounds took
  auto open = [&](int scores) { return taken < 0 ? scores : where(b, taken, imm(0.f), Operand{scores}); };
  auto bestOf = [&](int scores) { return b.reduce(ReduceFn::Max, open(scores), {d}, true); };
  std::vector<int> values, indices;
  for (int64_t i = 0; i < k; ++i) {
    const int rest = taken < 0 ? keys : where(b, taken, imm(negInf), Operand{keys});
    int best = -1, value = -1;
    if (largest) {
      const int m = b.reduce(ReduceFn::Max, rest, {d}, true);
      const int equal = b.binary(Fn::Eq, Operand{keys}, Operand{m});
      best = bestOf(where(b, nan, Operand{score}, Operand{where(b, equal, Operand{score}, imm(0.f))}));
      value = m;
    } else {
      const int m = b.reduce(ReduceFn::Max, where(b, nan, imm(negInf), Operand{rest}), {d}, true);
      const int equal = b.binary(Fn::Eq, Operand{keys}, Operand{m});
      const int number = bestOf(where(b, equal, Operand{score}, imm(0.f)));
      const int firstNan = bestOf(where(b, nan, Operand{score}, imm(0.f)));
      const int isNumber = b.binary(Fn::Gt, Operand{number}, imm(0.f));
      best = where(b, isNumber, Operand{number}, Operand{firstNan});
      value = where(b, isNumber, Operand{b.unary(Fn::Neg, m)}, imm(std::numeric_limits<float>::quiet_NaN()));
    }
    const int hit = b.binary(Fn::Eq, Operand{score}, Operand{best});
    taken = taken < 0 ? hit : where(b, hit, Operand{hit}, Operand{taken});
    values.push_back(value);
    indices.push_back(b.cast(b.binary(Fn::Sub, imm(static_cast<float>(n)), Operand{best}), DType::I64));
  }
  if (k == 1) return {values[0], indices[0]};
  return {b.concat(values, d), b.concat(indices, d)};
}

std::pair<int, int> sort(Builder& b, int x, int d, bool descending) {
  // The rank of x_j: how many x_i sort before it (by value, NaN last ascending and first descending), plus the equal
  // ones at earlier positions (stable). Output position q then takes the j whose rank is q.
  const int r = b.rank(x);
  const int64_t n = b.shape(x)[static_cast<size_t>(d)];
  const int xj = overNewAxis(b, x, n), xi = alongNewAxis(b, x, d, n);  // [.., j, .., i]
  const int before = b.cast(b.binary(descending ? Fn::Gt : Fn::Lt, Operand{xi}, Operand{xj}), DType::F32);
  const int nanI = b.cast(b.binary(Fn::Ne, Operand{xi}, Operand{xi}), DType::F32);
  const int nanJ = b.cast(b.binary(Fn::Ne, Operand{xj}, Operand{xj}), DType::F32);
  const int numberJ = b.binary(Fn::Sub, imm(1.f), Operand{nanJ}), numberI = b.binary(Fn::Sub, imm(1.f), Operand{nanI});
  const int nanOrder = descending ? b.binary(Fn::Mul, Operand{nanI}, Operand{numberJ})
                                  : b.binary(Fn::Mul, Operand{nanJ}, Operand{numberI});
  const int equal = b.binary(Fn::Max, Operand{b.cast(b.binary(Fn::Eq, Operand{xi}, Operand{xj}), DType::F32)},
                             Operand{b.binary(Fn::Mul, Operand{nanI}, Operand{nanJ})});
  const int earlier = squareMask(b, n, d, r, "sort earlier positions", [](int64_t j, int64_t i) { return i < j; });
  const int counted = b.binary(Fn::Add, Operand{b.binary(Fn::Max, Operand{before}, Operand{nanOrder})},
                               Operand{b.binary(Fn::Mul, Operand{equal}, Operand{earlier})});
  const int rank = b.reduce(ReduceFn::Sum, counted, {r}, false);
  const int q = alongAxis(b, n, d, r + 1, "sort positions", [](int64_t i) { return static_cast<float>(i); });
  const int hit = b.binary(Fn::Eq, Operand{alongNewAxis(b, rank, d, n)}, Operand{q});  // [.., q, .., j]
  const int values = b.reduce(ReduceFn::Sum, where(b, hit, Operand{alongNewAxis(b, x, d, n)}, imm(0.f)), {r}, false);
  const int j = alongAxis(b, n, r, r + 1, "sort indices", [](int64_t i) { return static_cast<float>(i); });
  const int indices = b.reduce(ReduceFn::Sum, where(b, hit, Operand{j}, imm(0.f)), {r}, false);
  return {values, b.cast(indices, DType::I64)};
}

int wrapped(Builder& b, int index, int64_t n) {
  const int negative = b.binary(Fn::Lt, Operand{index}, imm(0.f));
  const int shifted = b.binary(Fn::Add, Operand{index}, imm(static_cast<float>(n)));
  return where(b, negative, Operand{shifted}, Operand{index});
}

int gatherAlong(Builder& b, int x, int d, int index) {
  // A row gather from x flattened to [numel, 1] at each element's linear position: its offset without d (a constant)
  // plus index times d's stride, in i64.
  const Shape s = b.shape(x), is = b.shape(index);
  std::vector<int64_t> stride(s.size(), 1);
  for (size_t k = s.size(); k-- > 1;) stride[k - 1] = stride[k] * s[k];
  std::vector<float> offsets(static_cast<size_t>(numel(is)));
  for (int64_t flat = 0; flat < numel(is); ++flat) {
    int64_t rest = flat, offset = 0;
    for (size_t k = is.size(); k-- > 0;) {
      if (static_cast<int>(k) != d) offset += (rest % is[k]) * stride[k];
      rest /= is[k];
    }
    offsets[static_cast<size_t>(flat)] = static_cast<float>(offset);
  }
  const int base = b.constant(is, std::move(offsets), "gather offsets", DType::I64);
  const int along = b.binary(Fn::Mul, Operand{wrapped(b, index, s[static_cast<size_t>(d)])},
                             imm(static_cast<float>(stride[static_cast<size_t>(d)])));
  const int at = b.reshape(b.binary(Fn::Add, Operand{base}, Operand{along}), {numel(is)});
  return b.reshape(b.gather(b.reshape(x, {numel(s), 1}), at), is);
}

int scatter(Builder& b, int x, int d, int index, Operand value, int src) {
  // Over a new last axis t (index's extent along d): hit[p, t] = (index[p with p_d = t] == p_d), p within the index's
  // extent in the other dims; positions beyond it (an index smaller than x there) are hit by nothing.
  const int r = b.rank(x);
  const Shape s = b.shape(x), is = b.shape(index);
  const int64_t n = s[static_cast<size_t>(d)];
  auto alongT = [&](int y) { return alongNewAxis(b, y, d, n); };
  const int pos = alongAxis(b, n, d, r + 1, "scatter positions", [](int64_t j) { return static_cast<float>(j); }, DType::I64);
  const int hit = b.binary(Fn::Eq, Operand{alongT(wrapped(b, index, n))}, Operand{pos});
  int any = b.reduce(ReduceFn::Max, b.cast(hit, DType::F32), {r}, false);
  int landed = -1;
  if (src >= 0) {
    for (int k = 0; k < r; ++k)  // src's part the index covers
      if (b.shape(src)[static_cast<size_t>(k)] != is[static_cast<size_t>(k)]) src = b.slice(src, k, 0, 1, is[static_cast<size_t>(k)]);
    landed = b.reduce(ReduceFn::Sum, where(b, hit, Operand{alongT(src)}, imm(0.f)), {r}, false);
  }
  for (int k = 0; k < r; ++k) {  // padded with positions no index reaches
    const int64_t have = is[static_cast<size_t>(k)], want = s[static_cast<size_t>(k)];
    if (k == d || have == want) continue;
    Shape pad = b.shape(any);
    pad[static_cast<size_t>(k)] = want - have;
    any = b.concat({any, b.constant(pad, std::vector<float>(static_cast<size_t>(numel(pad)), 0.f), "scatter missed")}, k);
    if (landed >= 0)
      landed = b.concat({landed, b.constant(pad, std::vector<float>(static_cast<size_t>(numel(pad)), 0.f), "scatter missed",
                                            b.dtype(landed))},
                        k);
  }
  return where(b, any, landed >= 0 ? Operand{landed} : value, Operand{x});
}

int cumsum(Builder& b, int x, int d) {
  const int64_t n = b.shape(x)[static_cast<size_t>(d)];
  const int upTo = squareMask(b, n, d, b.rank(x), "cumsum prefix", [](int64_t q, int64_t t) { return t <= q; });
  return b.reduce(ReduceFn::Sum, where(b, upTo, Operand{alongNewAxis(b, x, d, n)}, imm(0.f)), {b.rank(x)}, false);
}

int histc(Builder& b, int x, int64_t bins, float lo, float hi) {
  // The bin of v is (v - lo) * bins / (hi - lo) truncated, hi itself in the last bin. With lo = hi = 0 the range is
  // the data's (its minimum and maximum, computed here); an empty range widens by 1 on each side.
  const int flat = b.reshape(x, {numel(b.shape(x))});
  Operand low = imm(lo), high = imm(hi);
  if (lo == 0.f && hi == 0.f) {
    const int smallest = b.unary(Fn::Neg, b.reduce(ReduceFn::Max, b.unary(Fn::Neg, flat), {0}, true));
    const int largest = b.reduce(ReduceFn::Max, flat, {0}, true);
    const int same = b.binary(Fn::Eq, Operand{smallest}, Operand{largest});
    low = Operand{where(b, same, Operand{b.binary(Fn::Sub, Operand{smallest}, imm(1.f))}, Operand{smallest})};
    high = Operand{where(b, same, Operand{b.binary(Fn::Add, Operand{largest}, imm(1.f))}, Operand{largest})};
  } else if (lo == hi) {
    low = imm(lo - 1.f);
    high = imm(hi + 1.f);
  }
  const Operand width = low.isImm() ? imm(high.imm - low.imm) : Operand{b.binary(Fn::Sub, high, low)};
  const int scaled = b.binary(Fn::Div, Operand{b.binary(Fn::Mul, Operand{b.binary(Fn::Sub, Operand{flat}, low)},
                                                        imm(static_cast<float>(bins)))},
                              width);
  const int bin = b.binary(Fn::Min, Operand{b.cast(scaled, DType::I64)}, imm(static_cast<float>(bins - 1)));
  const int inside = b.binary(Fn::And, Operand{b.binary(Fn::Ge, Operand{flat}, low)}, Operand{b.binary(Fn::Le, Operand{flat}, high)});
  const int each = alongAxis(b, bins, 1, 2, "histc bins", [](int64_t i) { return static_cast<float>(i); }, DType::I64);
  const int hit = b.binary(Fn::And, Operand{b.binary(Fn::Eq, Operand{overNewAxis(b, bin, bins)}, Operand{each})},
                           Operand{overNewAxis(b, inside, bins)});
  return b.reduce(ReduceFn::Sum, b.cast(hit, b.dtype(x)), {0}, false);
}

int floorDivide(Builder& b, int a, Operand divisor) {
  // The f32 quotient truncated toward zero, one less where that overshoots: a quotient that went past a / divisor
  // (back above a for a positive divisor, below it for a negative one).
  const int af = b.cast(a, DType::F32);
  const Operand df = divisor.isImm() ? divisor : Operand{b.cast(divisor.node, DType::F32)};
  const int truncated = b.cast(b.binary(Fn::Div, Operand{af}, df), DType::I64);
  const int back = b.binary(Fn::Mul, Operand{b.cast(truncated, DType::F32)}, df);
  const int above = b.binary(Fn::Gt, Operand{back}, Operand{af}), below = b.binary(Fn::Lt, Operand{back}, Operand{af});
  const int over = divisor.isImm() ? (divisor.imm > 0 ? above : below)
                                   : where(b, b.binary(Fn::Gt, df, imm(0.f)), Operand{above}, Operand{below});
  return b.binary(Fn::Sub, Operand{truncated}, Operand{b.cast(over, DType::I64)});
}

int groupedProduct(Builder& b, int input, int weight, int offsets) {
  const int64_t rows = b.shape(input)[0], k = b.shape(input)[1];
  const int64_t groups = b.shape(weight)[0], n = b.shape(weight)[2];
  const int row = alongAxis(b, rows, 0, 2, "grouped rows", [](int64_t i) { return static_cast<float>(i); }, DType::I64);
  const int ended = b.binary(Fn::Le, Operand{b.reshape(offsets, {1, groups})}, Operand{row});  // [rows, groups]
  const int group = b.binary(Fn::Min, Operand{b.reduce(ReduceFn::Sum, b.cast(ended, DType::I64), {1}, false)},
                             imm(static_cast<float>(groups - 1)));
  const int picked = b.reshape(b.gather(b.reshape(weight, {groups, k * n}), group), {rows, k, n});
  return b.reshape(b.matmul(b.reshape(input, {rows, 1, k}), picked), {rows, n});
}

}  // namespace kiln::tensor::routing
