// Decompositions of the ops that route tokens to experts (issue 44: topk, sort, gather, scatter, histc, cumsum, the
// grouped product), into Tensor-IR primitives. tensor-lower-from-torch (lower_from_torch.cpp) reads and checks each
// op's arguments and calls these; they assume valid arguments (dims normalized, sizes checked) and raise no errors.
//
// Positions along a dim are counted in f32 constants (argmax's rule), so the index results are exact for dims of up to
// 2^24 positions; integer values pass f32 arithmetic (exact up to 2^24, as everywhere in kiln). Ops that compare
// every position with every other (sort, cumsum, scatter) build an [.., n, .., n] intermediate: O(n^2) work per row,
// meant for router-sized dims.
#pragma once
#include <cstdint>
#include <utility>

#include "kiln/tensor/builder.h"

namespace kiln::tensor::routing {

// (values, indices) of the k largest (or smallest) along d, in order; NaN ranks above every number (first of the
// largest, last of the smallest); equal values first position first.
std::pair<int, int> topk(Builder& b, int x, int64_t k, int d, bool largest);

// (values, indices) of x sorted along d, stably (equal values keep their order); NaN after every number ascending,
// before every number descending, as PyTorch.
std::pair<int, int> sort(Builder& b, int x, int d, bool descending);

// The index of the first maximum along d (NaN counting as the maximum), as torch.argmax; i64.
int firstMaximum(Builder& b, int x, int d, bool keepdim);

// Integer index with negative entries wrapped by n.
int wrapped(Builder& b, int index, int64_t n);

// out[p] = x[p with p_d = index[p]] (index of x's rank, no larger in the other dims).
int gatherAlong(Builder& b, int x, int d, int index);

// x with x[p with p_d = index[p]] replaced by `value` (an immediate), or by src[p] when src >= 0 (the sum of those
// landing on one position); index of x's rank and no larger than x in the other dims, src no smaller than index.
int scatter(Builder& b, int x, int d, int index, Operand value, int src);

// Inclusive prefix sums of x along d, in x's dtype.
int cumsum(Builder& b, int x, int d);

// torch.histc: counts of x's elements (flattened) in `bins` equal bins over [lo, hi] (hi in the last bin; others
// outside, and NaN, not counted), in x's dtype; lo = hi = 0 takes the data's range, and an empty range widens by 1.
int histc(Builder& b, int x, int64_t bins, float lo, float hi);

// floor(a / divisor) of an integer tensor by an integer constant or tensor, exact for |a| < 2^24 (a zero divisor gives
// an unspecified value, where PyTorch raises).
int floorDivide(Builder& b, int a, Operand divisor);

// torch._grouped_mm(input [S, K], weight [E, K, N], offsets [E]): row r of the result is input[r] @ weight[e], e the
// group whose rows r falls in (offsets[e - 1] <= r < offsets[e]; rows past the last offset take the last group,
// where PyTorch leaves them unwritten). The groups' weights are gathered per row by index, so a row reads its own
// group's weight only.
int groupedProduct(Builder& b, int input, int weight, int offsets);

}  // namespace kiln::tensor::routing
