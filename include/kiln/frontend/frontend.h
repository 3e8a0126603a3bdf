// The frontend: the only part of kiln that sees LibTorch (DESIGN.md §2).
//
// importModel loads a TorchScript archive, freezes and inlines `forward`, and specialises it to the input
// shapes by evaluating the graph once with LibTorch: every value that does not depend on input *data*
// (sizes, integer arithmetic, lists, tensors built from constants) is computed and becomes a constant, and
// each node left does tensor work. Work on input data runs on meta tensors, which give shapes and dtypes
// without computing anything. Input names, shapes and dtypes come from the archive's
// extra file `kiln_inputs.json` (written by models/kiln_export.py), overridden by --input.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "kiln/support/host_tensor.h"
#include "kiln/torch/ir.h"

namespace kiln::frontend {

struct InputSpec {
  std::string name;
  Shape shape;
  DType dtype = DType::F32;
};

// Parses "NAME=1x32x2048:f32" (dtype optional: keeps the recorded one). Throws UsageError when malformed.
struct InputOverride {
  std::string name;
  Shape shape;
  std::optional<DType> dtype;
};
InputOverride parseInputOverride(const std::string& text);

// Throws UserError for a missing/unreadable/non-TorchScript file, missing input records, overrides that do
// not name an input, or shapes the model cannot run with. `castTo` (--dtype) first casts the module's
// floating-point parameters and buffers, and its floating-point inputs, to f16 or bf16.
torch::Graph importModel(const std::string& path, const std::vector<InputOverride>& overrides,
                         std::optional<DType> castTo = std::nullopt);

// Runs the module's forward with LibTorch (on the GPU when onGpu) and returns its tensor outputs, tuples
// flattened in order. The ground truth for `kiln run --check` and the tests.
std::vector<HostTensor> runReference(const std::string& path, const std::vector<HostTensor>& inputs, bool onGpu,
                                     std::optional<DType> castTo = std::nullopt);

}  // namespace kiln::frontend
