// The schedule space of matrix products, for `kiln tune` (issue 46): the first strategy searched is the tensor-core
// product that tile-shape-products shapes. For each distinct product of a program (operand type, m, n, k, stages,
// other output points: what a --product-shapes entry is keyed by), the kernels that are it, every tile and split the
// model considers with its predicted µs, the 128 x 256 stream-K walk where the stream-K rule could take it, and the
// analytic choice (the model's own, the prior of a search). A candidate is forced through a --product-shapes entry
// (tableEntry), so the schedule a search measures is the one a compile with that entry produces.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/tile/ir.h"

namespace kiln::tile {

struct SpaceCandidate {
  int64_t tileM = 0, tileN = 0, split = 1;
  bool streamK = false;
  double micros = 0;      // the model's prediction (for a stream-K walk: of the same tile unwalked)
  bool analytic = false;  // what tile-shape-products chooses without a table
  std::string name() const;  // "64x128 split 2", "128x256 stream-K"
};

struct ProductSpace {
  DType type = DType::BF16;
  int64_t m = 0, n = 0, k = 0, stages = 1, outer = 1;
  std::vector<int> kernels;                // indices of the program's kernels that are this product
  std::vector<SpaceCandidate> candidates;  // by predicted µs, fastest first; exactly one is the analytic choice
  std::string key() const;                 // "bf16 128x2560x2048, 1 stage"
};

// The products of p that tile-shape-products would shape, grouped by their --product-shapes key, in program order of
// their first kernel. p: a Tile program as tile-shape-products receives it (the passes before it have run).
std::vector<ProductSpace> productSpaces(const Program& p);

// The --product-shapes entry that makes a compile take candidate c for every kernel of s.
TabledShape tableEntry(const ProductSpace& s, const SpaceCandidate& c);

}  // namespace kiln::tile
