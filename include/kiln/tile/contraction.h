// Recognising matrix products in Loop IR, for the tiled schedule (tile-tiled-contractions) and its lowering.
//
// A kernel is a contraction when every stage sums, over one axis k of the same extent K, the product of two
// operands: A, which reads the output axis m but not the output axis n, and B, which reads n but not m. Other
// output axes (batch, heads) may appear in both. The result may apply any epilogue to the stages' totals (bias,
// residual, scale, silu(gate)·up). Examples: a linear layer (m = tokens, n = features), attention's q·kᵀ and p·v
// (per batch and head), the gate/up pair of a SwiGLU MLP (two stages sharing A).
#pragma once
#include <optional>
#include <vector>

#include "kiln/loop/ir.h"

namespace kiln::tile {

struct Contraction {
  int mAxis = -1, nAxis = -1;  // positions in Kernel::parallel
  int64_t m = 0, n = 0, k = 0;
  struct Stage {
    loop::ExprP a, b;  // the two factors of the stage's value
    int kVar = -1;     // the stage's reduction variable
  };
  std::vector<Stage> stages;
  int64_t outerPoints = 1;  // product of the other output axes' extents
};

// The contraction a kernel is, with m and n the widest axes that separate its operands; nullopt otherwise.
// Given axes (from a schedule's knobs) are used instead of choosing.
std::optional<Contraction> findContraction(const loop::Kernel& k, int mAxis = -1, int nAxis = -1);

// The type tensor cores can multiply this contraction's operands in without changing their values: bf16 (or f16)
// when every operand of every stage is a load of a bf16 (f16) buffer, possibly converted to f32. nullopt otherwise.
std::optional<DType> tensorCoreType(const loop::Program& p, const Contraction& c);

// The TiledContraction schedule of `c` with square tiles of `tile` (16, 32 or 64), 16 deep, a (tile/16)^2
// register tile per thread on CUDA cores (tile-tiled-contractions' schedule; later tile passes refine it).
struct TiledContraction;
TiledContraction tiledSchedule(const Contraction& c, int64_t tile);

// Elements one 16-byte cp.async moves (bf16/f16).
constexpr int64_t kAsyncCopyElements = 8;
// Every operand of every stage can be copied slice by slice with 16-byte cp.async into [row][k] slices: a plain
// load of a buffer of the type the schedule multiplies (its mma type; f32 for ffma), reading no indices from memory,
// in which every c consecutive k (c = 16 bytes of elements: 8 of bf16/f16, 4 of f32; from a multiple of c) are c
// consecutive elements (k contiguous: [row][k], or [k / d][row][k mod d] with d a multiple of c, as attention's output
// is read by o_proj); the innermost extent, K and tile_k multiples of c (every copy 16-byte aligned and either wholly
// inside the matrix or wholly outside).
bool asyncCopyable(const loop::Program& p, const loop::Kernel& k, const TiledContraction& s);

// An operand as a TMA tensor map sees it: element (row, k) of a plain load of `buffer` at flat element offset + row *
// rowStride + k, for row < rows, k < K; nothing else varies it (no other axes but unit ones, no gathers).
// With a split reduction the k a part reads are shifted: k at colShift + k (colShift over the kernel's other loop
// variables, e.g. ps * 1408), and the view spans `cols` columns (the row's whole extent); otherwise colShift is null
// and the view K columns.
// Other output axes may shift the rows instead (an expert product's matrix ex of W[ex, n, k]: row n of matrix ex is row
// ex * N + n of the buffer's rows): rowShift over those variables, in rows, and the view spans `rows` rows (the rows
// from offset to the buffer's end); otherwise rowShift is null and the view the operand's row extent.
struct TmaView {
  int buffer = -1;
  int64_t offset = 0, rowStride = 0;
  int64_t cols = 0;  // 0: the reduction's extent K
  Idx colShift;
  int64_t rows = 0;  // 0: the operand's row extent
  Idx rowShift;
};
// The view of `operand` with rows along loop variable rowVar and the reduction along kVar (k's extent K), if it is one
// of that form with 16-byte aligned offset and row stride; nullopt otherwise.
std::optional<TmaView> tmaView(const loop::Program& p, const loop::Kernel& k, const loop::ExprP& operand, int rowVar, int kVar);
// Every operand of every stage of a wgmma product has a tmaView (rows along m for A, n for B), with shifted rows only in
// a product read only at its rows' matrices (loop::ReadOnlyAt).
bool tmaCopyable(const loop::Program& p, const loop::Kernel& k, const TiledContraction& s);

}  // namespace kiln::tile
