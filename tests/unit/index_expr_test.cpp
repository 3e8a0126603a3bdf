// IndexExpr: constructors' folding, range-aware simplification, evaluation and printing.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "kiln/support/error.h"
#include "kiln/support/index_expr.h"

namespace kiln {
namespace {

const Idx p0 = idxVar(0, "p0"), p1 = idxVar(1, "p1"), p2 = idxVar(2, "p2");

// simplify(e) must agree with e at every point of the extents (exhaustively; extents are small).
void expectSound(const Idx& e, const VarExtents& ext) {
  Idx s = simplify(e, ext);
  std::vector<int64_t> env(8, 0);
  std::function<void(VarExtents::const_iterator)> walk = [&](VarExtents::const_iterator it) {
    if (it == ext.end()) {
      ASSERT_EQ(evaluate(s, env), evaluate(e, env))
          << toString(e) << " simplified to " << toString(s) << " at p0=" << env[0] << " p1=" << env[1] << " p2=" << env[2];
      return;
    }
    for (int64_t v = 0; v < it->second; ++v) {
      env[it->first] = v;
      walk(std::next(it));
    }
  };
  walk(ext.begin());
}

TEST(IndexExpr, ConstructorsFoldConstants) {
  EXPECT_EQ(constValue(idxConst(3) + idxConst(4)), 7);
  EXPECT_EQ(constValue(idxConst(3) * idxConst(4)), 12);
  EXPECT_TRUE(sameIdx(p0 + idxConst(0), p0));
  EXPECT_TRUE(sameIdx(p0 * idxConst(1), p0));
  EXPECT_EQ(constValue(p0 * idxConst(0)), 0);
  EXPECT_TRUE(sameIdx(floorDiv(p0, 1), p0));
  EXPECT_EQ(constValue(mod(p0, 1)), 0);
  EXPECT_EQ(constValue(floorDiv(idxConst(-7), 2)), -4);  // floor, not truncation
  EXPECT_EQ(constValue(mod(idxConst(-7), 2)), 1);
  EXPECT_EQ(constValue(idxMin(idxConst(3), idxConst(-2))), -2);
  EXPECT_EQ(constValue(idxMax(idxConst(3), idxConst(-2))), 3);
  EXPECT_THROW(floorDiv(p0, 0), InternalError);
  EXPECT_THROW(mod(p0, -3), InternalError);
}

TEST(IndexExpr, FloorDivOfAffineSplit) {
  VarExtents ext{{0, 4}, {1, 64}};
  Idx e = floorDiv(idxMul(p0, 64) + p1, 64);
  EXPECT_EQ(toString(e), "(p0*64 + p1) floordiv 64");
  Idx s = simplify(e, ext);
  EXPECT_TRUE(sameIdx(s, p0)) << toString(s);
  expectSound(e, ext);
  // Without the bound on p1 the remainder may carry: only the divisible part leaves the floordiv.
  VarExtents wide{{0, 4}, {1, 130}};
  Idx w = simplify(e, wide);
  EXPECT_EQ(toString(w), "p0 + p1 floordiv 64");
  expectSound(e, wide);
}

TEST(IndexExpr, ModOfAffineSplit) {
  VarExtents ext{{0, 4}, {1, 64}};
  Idx e = mod(idxMul(p0, 64) + p1, 64);
  EXPECT_TRUE(sameIdx(simplify(e, ext), p1)) << toString(simplify(e, ext));
  expectSound(e, ext);
  // p0*64 vanishes under mod 64 even when p1 may exceed 64.
  VarExtents wide{{0, 4}, {1, 100}};
  EXPECT_EQ(toString(simplify(e, wide)), "p1 mod 64");
  expectSound(e, wide);
  // A constant offset: (p1 + 64) mod 64 = p1, (p1 + 3) mod 64 stays.
  EXPECT_TRUE(sameIdx(simplify(mod(idxAdd(p1, 64), 64), ext), p1));
  EXPECT_EQ(toString(simplify(mod(idxAdd(p1, 3), 64), ext)), "(p1 + 3) mod 64");
  expectSound(mod(idxAdd(p1, 3), 64), ext);
  // Bounded below the modulus: the mod disappears.
  EXPECT_TRUE(sameIdx(simplify(mod(p1, 128), ext), p1));
}

// A view chain: a [4, 8] tensor read through reshape [4,8] -> [32] -> [2,16], as the consumer's axes (q0 < 2,
// q1 < 16) index it; composing the maps gives floordiv/mod of the flat index, which simplifies back to a
// clean affine form.
TEST(IndexExpr, FloorDivOfViewChain) {
  VarExtents ext{{0, 2}, {1, 16}};
  Idx flat = idxMul(p0, 16) + p1;    // position in the [32] view
  Idx row = floorDiv(flat, 8);       // [4, 8] row
  Idx col = mod(flat, 8);            // [4, 8] column
  Idx rowS = simplify(row, ext), colS = simplify(col, ext);
  EXPECT_EQ(toString(rowS), "p0*2 + p1 floordiv 8");
  EXPECT_EQ(toString(colS), "p1 mod 8");
  expectSound(row, ext);
  expectSound(col, ext);
  // And back: the flat index recomputed from (row, col) is the original one.
  Idx back = simplify(idxMul(row, 8) + col, ext);
  expectSound(idxMul(row, 8) + col, ext);
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 16; ++b) EXPECT_EQ(evaluate(back, {a, b}), a * 16 + b);
  // Nested: ((p0*8 + p1) floordiv 8) mod 4 with p0 < 4, p1 < 8 is p0.
  VarExtents e2{{0, 4}, {1, 8}};
  Idx nested = mod(floorDiv(idxMul(p0, 8) + p1, 8), 4);
  EXPECT_TRUE(sameIdx(simplify(nested, e2), p0)) << toString(simplify(nested, e2));
  expectSound(nested, e2);
}

TEST(IndexExpr, SimplifyCollectsLikeTerms) {
  VarExtents ext{{0, 4}, {1, 8}};
  Idx e = p0 + p1 + idxMul(p0, 3) + idxConst(2) + idxConst(-2);
  EXPECT_EQ(toString(simplify(e, ext)), "p0*4 + p1");
  Idx cancel = p0 + idxMul(p0, -1) + p1;
  EXPECT_TRUE(sameIdx(simplify(cancel, ext), p1)) << toString(simplify(cancel, ext));
  EXPECT_EQ(constValue(simplify(idxMul(p0, 2) + idxMul(p0, -2), ext)), 0);
}

TEST(IndexExpr, SimplifyMinMaxByRange) {
  VarExtents ext{{0, 4}, {1, 8}};
  EXPECT_TRUE(sameIdx(simplify(idxMin(p0, idxConst(10)), ext), p0));
  EXPECT_TRUE(sameIdx(simplify(idxMax(p0, idxConst(0)), ext), p0));
  EXPECT_EQ(toString(simplify(idxMin(p1, idxConst(5)), ext)), "min(p1, 5)");
  expectSound(idxMin(p1, idxConst(5)), ext);
}

TEST(IndexExpr, RandomAffineFloorDivModAreSound) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    int64_t c0 = std::uniform_int_distribution<int64_t>(-20, 40)(rng), c1 = std::uniform_int_distribution<int64_t>(-20, 40)(rng);
    int64_t k = std::uniform_int_distribution<int64_t>(-30, 30)(rng), d = std::uniform_int_distribution<int64_t>(1, 17)(rng);
    VarExtents ext{{0, std::uniform_int_distribution<int64_t>(1, 6)(rng)}, {1, std::uniform_int_distribution<int64_t>(1, 9)(rng)}};
    Idx a = idxAdd(idxMul(p0, c0) + idxMul(p1, c1), k);
    SCOPED_TRACE(toString(a) + " by " + std::to_string(d));
    expectSound(floorDiv(a, d), ext);
    expectSound(mod(a, d), ext);
    expectSound(mod(floorDiv(a, d), 3), ext);
    expectSound(floorDiv(mod(a, d), 2), ext);
  }
}

TEST(IndexExpr, Range) {
  VarExtents ext{{0, 4}, {1, 8}};
  auto r = idxRange(idxMul(p0, 8) + p1, ext);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, (std::pair<int64_t, int64_t>{0, 31}));
  EXPECT_EQ(idxRange(mod(p1, 4), ext), (std::pair<int64_t, int64_t>{0, 3}));
  EXPECT_EQ(idxRange(floorDiv(p1, 4), ext), (std::pair<int64_t, int64_t>{0, 1}));
  EXPECT_FALSE(idxRange(p2, ext));  // unknown extent
}

TEST(IndexExpr, Evaluate) {
  Idx e = mod(floorDiv(idxMul(p0, 64) + p1, 8), 4) + idxMin(p2, idxConst(3));
  EXPECT_EQ(evaluate(e, {2, 17, 9}), ((2 * 64 + 17) / 8) % 4 + 3);
  EXPECT_EQ(evaluate(e, {0, 0, 1}), 1);
  EXPECT_EQ(evaluate(idxMax(p0, p1), {5, 9}), 9);
}

TEST(IndexExpr, ToString) {
  EXPECT_EQ(toString(idxMul(p0, 64) + p1), "p0*64 + p1");
  EXPECT_EQ(toString(idxAdd(p0, -3)), "p0 - 3");
  EXPECT_EQ(toString(mod(floorDiv(p1, 4), 8)), "(p1 floordiv 4) mod 8");
  EXPECT_EQ(toString(mod(floorDiv(p1, 4), 8), /*cStyle=*/true), "(p1 / 4) % 8");
  EXPECT_EQ(toString(idxMul(floorDiv(p1, 4), 8)), "(p1 floordiv 4)*8");
  EXPECT_EQ(toString(idxMul(idxAdd(p0, 1), 8)), "(p0 + 1)*8");
  EXPECT_EQ(toString(floorDiv(idxMul(p0, 64) + p1, 64), true), "(p0*64 + p1) / 64");
  EXPECT_EQ(toString(idxMin(p0, idxConst(7))), "min(p0, 7)");
  EXPECT_EQ(toString(idxConst(-5)), "-5");
  // Printing then evaluating the C form agrees on non-negative values.
  EXPECT_EQ(toString(p0 * p1), "p0*p1");
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// The small-remainder rule: (c*B + S) floordiv d = B floordiv (d/c) when 0 <= S < c and c | d. Checked
// exhaustively on random sums whose coefficients share power-of-two factors, as views and head groupings make.
TEST(IndexExprSmallRemainder, MatchesEvaluationOnRandomSums) {
  std::mt19937 rng(7);
  auto pick = [&](std::vector<int64_t> v) { return v[rng() % v.size()]; };
  for (int trial = 0; trial < 300; ++trial) {
    VarExtents ext{{0, pick({1, 2, 4, 16})}, {1, pick({2, 3, 8, 16})}, {2, pick({2, 4, 5})}};
    Idx v0 = idxVar(0, "a"), v1 = idxVar(1, "b"), v2 = idxVar(2, "c");
    Idx sum = idxMul(v0, pick({1, 2, 16, 64})) + idxMul(v1, pick({1, 4, 16, 256})) + idxMul(v2, pick({8, 64, 128, 256}));
    sum = idxAdd(sum, pick({0, 0, 1, 3}));
    int64_t d = pick({2, 4, 32, 64, 512});
    for (Idx e : {floorDiv(sum, d), mod(sum, d)}) {
      Idx s = simplify(e, ext);
      for (int64_t a = 0; a < ext[0]; ++a)
        for (int64_t b = 0; b < ext[1]; ++b)
          for (int64_t c = 0; c < ext[2]; ++c)
            ASSERT_EQ(evaluate(s, {a, b, c}), evaluate(e, {a, b, c})) << toString(e) << " simplified to " << toString(s);
    }
  }
}

// provablyMultipleOf must never claim a multiple that is not one: checked at every point of the extents.
void expectMultipleSound(const Idx& e, int64_t m, const VarExtents& ext) {
  if (!provablyMultipleOf(e, m, ext)) return;
  std::vector<int64_t> env(8, 0);
  std::function<void(VarExtents::const_iterator)> walk = [&](VarExtents::const_iterator it) {
    if (it == ext.end()) {
      ASSERT_EQ(evaluate(e, env) % m, 0) << toString(e) << " claimed a multiple of " << m;
      return;
    }
    for (int64_t v = 0; v < it->second; ++v) {
      env[it->first] = v;
      walk(std::next(it));
    }
  };
  walk(ext.begin());
}

TEST(IndexExpr, ProvablyMultipleOf) {
  VarExtents ext{{0, 5}, {1, 9}, {2, 1}};
  EXPECT_TRUE(provablyMultipleOf(idxConst(24), 8, ext));
  EXPECT_TRUE(provablyMultipleOf(idxConst(0), 8, ext));
  EXPECT_FALSE(provablyMultipleOf(idxConst(20), 8, ext));
  EXPECT_TRUE(provablyMultipleOf(p0, 1, ext));
  EXPECT_FALSE(provablyMultipleOf(p0, 2, ext));
  EXPECT_TRUE(provablyMultipleOf(p2, 4, ext));  // extent 1: always 0
  EXPECT_TRUE(provablyMultipleOf(idxMul(p0, 8), 4, ext));
  EXPECT_TRUE(provablyMultipleOf(idxMul(p0, 8) + idxMul(p1, 16) + idxConst(24), 8, ext));
  EXPECT_FALSE(provablyMultipleOf(idxMul(p0, 8) + p1, 8, ext));
  EXPECT_FALSE(provablyMultipleOf(idxMul(p0, 8) + idxConst(4), 8, ext));
  EXPECT_TRUE(provablyMultipleOf(idxMul(p0, 4) * idxMul(p1, 2), 8, ext));  // multiples multiply
  EXPECT_TRUE(provablyMultipleOf(floorDiv(idxMul(p0, 32), 4), 8, ext));
  EXPECT_FALSE(provablyMultipleOf(floorDiv(idxMul(p0, 32), 8), 8, ext));
  EXPECT_TRUE(provablyMultipleOf(mod(idxMul(p0, 8), 64), 8, ext));
  EXPECT_FALSE(provablyMultipleOf(mod(idxMul(p0, 8), 12), 8, ext));  // 8 mod 12 = 8, 16 mod 12 = 4
  EXPECT_TRUE(provablyMultipleOf(idxMin(idxMul(p0, 8), idxConst(16)), 8, ext));
  EXPECT_FALSE(provablyMultipleOf(idxLoad(0, "ids", p0), 2, ext));
  EXPECT_THROW(provablyMultipleOf(p0, 0, ext), InternalError);
  Idx cases[] = {idxMul(p0, 8) + idxMul(p1, 4),       mod(idxMul(p0, 6), 9),         floorDiv(idxMul(p0, 24), 3),
                 idxXor(idxMul(p0, 8), idxConst(16)), idxXor(idxMul(p0, 8), p1),      shl(idxMul(p1, 3), 2),
                 shr(idxMul(p0, 24), 2),              shr(idxMul(p0, 12), 3),        idxMul(p0, 3) * idxMul(p1, 6)};
  for (const Idx& e : cases)
    for (int64_t m : {2, 3, 4, 6, 8, 16}) expectMultipleSound(e, m, ext);
}

TEST(IndexExpr, XorAndShifts) {
  VarExtents ext{{0, 8}, {1, 16}};
  EXPECT_EQ(constValue(idxXor(idxConst(6), idxConst(3))), 5);
  EXPECT_TRUE(sameIdx(idxXor(p0, idxConst(0)), p0));
  EXPECT_TRUE(sameIdx(idxXor(idxConst(0), p0), p0));
  EXPECT_EQ(constValue(shl(idxConst(3), 4)), 48);
  EXPECT_EQ(constValue(shr(idxConst(-7), 1)), -4);  // arithmetic: floor
  EXPECT_TRUE(sameIdx(shl(p0, 0), p0));
  EXPECT_THROW(shl(p0, -1), InternalError);
  // C operators; xor and shifts parenthesize non-atomic operands (they bind more loosely than + in C).
  Idx swz = idxXor(mod(p1, 8), floorDiv(p0, 2)) + idxMul(p0, 64);
  EXPECT_EQ(toString(swz, true), "((p1 % 8) ^ (p0 / 2)) + p0*64");
  EXPECT_EQ(toString(shl(p0 + p1, 3)), "(p0 + p1) << 3");
  EXPECT_EQ(toString(idxMul(shr(p1, 2), 4)), "(p1 >> 2)*4");
  std::vector<int64_t> env{5, 13};
  EXPECT_EQ(evaluate(swz, env), ((13 % 8) ^ (5 / 2)) + 5 * 64);
  EXPECT_EQ(evaluate(shl(p1, 2) + shr(p1, 2), env), (13 << 2) + (13 >> 2));
  // Ranges: xor of non-negative operands stays below the next power of two above the larger maximum.
  EXPECT_EQ(idxRange(idxXor(p0, p1), ext), (std::pair<int64_t, int64_t>{0, 15}));
  EXPECT_EQ(idxRange(idxXor(p0, idxConst(8)), ext), (std::pair<int64_t, int64_t>{0, 15}));
  EXPECT_EQ(idxRange(shl(p0, 2), ext), (std::pair<int64_t, int64_t>{0, 28}));
  EXPECT_EQ(idxRange(shr(p1, 2), ext), (std::pair<int64_t, int64_t>{0, 3}));
  // Simplify: folding, x ^ 0, and x ^ c = x + c when c's bits lie above x's range.
  EXPECT_TRUE(sameIdx(simplify(idxXor(p0, idxConst(3) + idxConst(-3)), ext), p0));
  EXPECT_EQ(toString(simplify(idxXor(p0, idxConst(8)), ext)), "p0 + 8");
  EXPECT_EQ(toString(simplify(idxXor(p0, idxConst(4)), ext)), "p0 ^ 4");
  EXPECT_EQ(toString(simplify(shl(p0 + p0, 1), ext)), "(p0*2) << 1");
  for (const Idx& e : {idxXor(p0, idxConst(8)), idxXor(p0, idxConst(4)), idxXor(p0, p1), shl(p0 + p1, 2), shr(p1 + p0, 1),
                       mod(idxXor(p1, p0) + idxMul(p0, 16), 16)})
    expectSound(e, ext);
  // Multiples: x ^ c is a multiple of m when x and c are.
  EXPECT_TRUE(provablyMultipleOf(idxXor(idxMul(p0, 8), idxConst(16)), 8, ext));
  EXPECT_FALSE(provablyMultipleOf(idxXor(idxMul(p0, 8), idxConst(4)), 8, ext));
  EXPECT_TRUE(provablyMultipleOf(shl(p0, 3), 8, ext));
  EXPECT_TRUE(provablyMultipleOf(shr(idxMul(p0, 32), 2), 8, ext));
  EXPECT_FALSE(provablyMultipleOf(shr(idxMul(p0, 8), 2), 8, ext));
  // substitute keeps the operators.
  Idx sub = substitute(idxXor(p0, shl(p1, 1)), [](int v, const std::string&) { return v == 0 ? idxConst(3) : nullptr; });
  EXPECT_EQ(toString(sub), "(p1 << 1) ^ 3");
}

}  // namespace
}  // namespace kiln
