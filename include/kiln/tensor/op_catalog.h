// The aten ops kiln compiles, each with what kiln computes for it and what it refuses in one line: the one source of
// `kiln ops`, of `kiln ops --markdown` (the table in docs/ops.md, which a test keeps equal to it) and of the lowering's
// list of supported ops (tensor::supportedOps, which `kiln inspect` marks a model's ops against).
#pragma once
#include <string>
#include <vector>

namespace kiln::tensor {

struct OpEntry {
  const char* name;      // "aten::gelu"
  const char* computes;  // what kiln computes: the arguments and overloads it takes, its decomposition where notable
  const char* refuses;   // what of it is refused in one line ("" when nothing beyond the general rules)
  // Rewritten by torch-import before the Tensor lowering sees it (split into slices, constants of a shape, in-place
  // forms made functional): lowerFromTorch has no case of its own for it.
  bool atImport = false;
};

// Every supported op, in the order `kiln ops` lists them.
const std::vector<OpEntry>& opCatalog();

// The ops lowerFromTorch has a case for (passes/tensor/lower_from_torch.cpp): with opCatalog's atImport ones, exactly
// the catalog (a test checks).
std::vector<std::string> loweredOps();

// docs/ops.md's table of the catalog, between its BEGIN and END marker lines (both included), ending in a newline.
std::string opsMarkdown();

}  // namespace kiln::tensor
