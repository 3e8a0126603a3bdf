// Interval arithmetic for the Kernel IR verifier (private to src/kernel): bounds of index expressions from the bounds of
// their variables, so the verifier can prove shared and global indices in range.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <utility>

#include "kiln/kernel/ir.h"

namespace kiln::kernel::detail {

using Range = std::pair<int64_t, int64_t>;  // inclusive [lo, hi]
using Ranges = std::map<int, Range>;

// The values e can take when each variable lies in its range (DefIdx variables without a range are expanded through
// `defs` when given); nullopt when a variable is unbounded or a bound would exceed 2^40.
std::optional<Range> interval(const Idx& e, const Ranges& ranges, const std::map<int, Idx>* defs);
// a / b rounded toward negative infinity.
int64_t floorDivI(int64_t a, int64_t b);
// The exact range of e when its variables (all bounded in `ranges`) take at most kEnumeratedCombinations combinations of
// values and it reads no memory, by trying each; nullopt otherwise. Interval arithmetic loses what ties a variable's
// occurrences together: attention's query-block order `-pb + (pb div H)(2 pb + 1 - H - QB) + QB - 1` is bounded [-11, 10]
// by intervals, and is a permutation of 0..7.
constexpr int64_t kEnumeratedCombinations = 4096;
std::optional<Range> enumeratedBound(const Idx& e, const Ranges& ranges);
// Even for every value of its variables: an even constant, a product with an even factor, a sum of even terms.
bool provablyEven(const Idx& e);
// `c*v + k` (c > 0) in a few structural forms: the variable, its coefficient and the constant (an If's condition narrows
// the variable's range by it).
struct AffineVar {
  int var;
  int64_t coef, constant;
};
std::optional<AffineVar> affineVar(const Idx& e);
// Both bounds at once (either may be unknown).
std::optional<Range> intersect(std::optional<Range> a, std::optional<Range> b);

}  // namespace kiln::kernel::detail
