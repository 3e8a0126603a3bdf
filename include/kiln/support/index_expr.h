// Integer index expressions: immutable trees over named variables (loop axes, thread indices).
//
// From Loop IR down, extents and indices are IndexExprs, not bare integers, so that a dynamic sequence
// length can later become a symbol. The simplifier knows the affine rules a CUDA engineer applies by hand
// (x*64 floordiv 64 = x, (x*64 + y) mod 64 = y when 0 <= y < 64) given each variable's extent.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

struct IndexNode;
using Idx = std::shared_ptr<const IndexNode>;

struct IndexNode {
  // Xor, Shl, Shr: C's `^`, `<<` and `>>` on two's-complement integers (Shr is arithmetic, i.e. floordiv by 2^c);
  // the shift amount b is a non-negative constant.
  enum class Op { Const, Var, Add, Mul, FloorDiv, Mod, Min, Max, Load, Xor, Shl, Shr };
  Op op;
  int64_t value = 0;   // Const
  int var = -1;        // Var: id, unique within the expression's scope
  std::string name;    // Var: printed name
  Idx a, b;            // operands of binary ops; Load: a is the flat element index
  int buffer = -1;     // Load: the buffer (or kernel parameter) holding integer indices, e.g. token ids
};

Idx idxConst(int64_t v);
Idx idxVar(int id, std::string name);
// Constructors fold constants and trivial identities; use simplify() for range-aware rewriting.
Idx operator+(const Idx& a, const Idx& b);
Idx operator*(const Idx& a, const Idx& b);
Idx idxAdd(const Idx& a, int64_t c);
Idx idxMul(const Idx& a, int64_t c);
Idx floorDiv(const Idx& a, int64_t d);
Idx mod(const Idx& a, int64_t d);
Idx idxMin(const Idx& a, const Idx& b);
Idx idxMax(const Idx& a, const Idx& b);
// Bitwise: a ^ b (swizzles), a << c and a >> c (c >= 0, constant).
Idx idxXor(const Idx& a, const Idx& b);
Idx shl(const Idx& a, int64_t c);
Idx shr(const Idx& a, int64_t c);
// An index read from memory (gather: table[ids[i]]): the value of buffer[flat], printed as name[flat].
Idx idxLoad(int buffer, std::string name, const Idx& flat);

std::optional<int64_t> constValue(const Idx& e);
bool sameIdx(const Idx& a, const Idx& b);

// Extents of variables: var id -> extent (the variable ranges over [0, extent)).
using VarExtents = std::map<int, int64_t>;

// Range-aware simplification (sound for every assignment within the extents).
Idx simplify(const Idx& e, const VarExtents& extents);
// Smallest and largest value of e over the extents; nullopt when a variable's extent is unknown.
std::optional<std::pair<int64_t, int64_t>> idxRange(const Idx& e, const VarExtents& extents);

// True only if e is a multiple of m (m > 0) for every assignment within the extents: structural (constants,
// sums and min/max of multiples, products with a factor that is one, mod d with both operand and d multiples,
// xor and shifts of multiples of powers of two); a variable is a multiple only when its extent is 1 (always 0).
// False means "not proven", never "not a multiple".
bool provablyMultipleOf(const Idx& e, int64_t m, const VarExtents& extents);

// The flat element index of `index` into a row-major array of `shape`, simplified.
Idx rowMajor(const std::vector<Idx>& index, const std::vector<int64_t>& shape, const VarExtents& extents);

// Replace variables: f(var id) returns a replacement or nullptr to keep the variable.
Idx substitute(const Idx& e, const std::function<Idx(int, const std::string&)>& f);
// Visit every variable id used by e.
void forEachVar(const Idx& e, const std::function<void(int)>& f);

// Visit / rewrite the memory reads inside an expression (for buffer renumbering and liveness).
void forEachIndexLoad(const Idx& e, const std::function<void(const IndexNode&)>& f);
Idx mapIndexLoads(const Idx& e, const std::function<Idx(const IndexNode& load, const Idx& flat)>& f);

// Evaluate with env[var id] holding each variable's value; `load` reads index values from memory.
using IndexLoader = std::function<int64_t(int buffer, int64_t flat)>;
int64_t evaluate(const Idx& e, const std::vector<int64_t>& env, const IndexLoader* load = nullptr);

// Prints e.g. "p0*64 + r0", "(p1 floordiv 4) mod 8"; `cStyle` prints C operators for the emitter.
std::string toString(const Idx& e, bool cStyle = false);

}  // namespace kiln
