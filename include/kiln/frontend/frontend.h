// The frontend: the only part of kiln that sees LibTorch (DESIGN.md §2).
//
// importModel loads a TorchScript archive, freezes and inlines `forward`, and specialises it to the input
// shapes by evaluating the graph once with LibTorch: every value that does not depend on input *data*
// (sizes, integer arithmetic, lists, tensors built from constants) is computed and becomes a constant, and
// each node left does tensor work. Work on input data runs on meta tensors, which give shapes and dtypes
// without computing anything. Input names come from the forward's arguments (skipping `self`), so a plain
// `torch.jit.trace(model, (x,)).save(path)` is accepted; shapes and dtypes from the archive's extra file
// `kiln_inputs.json` (written by models/kiln_export.py) when it has one, else from --input (which also
// overrides a recorded input). Module buffers the forward writes in place (a static KV cache) become the model's
// state: extra inputs after the forward's own, and their new values extra outputs (kiln/torch/ir.h State,
// docs/decode.md).
#pragma once
#include <cstdint>
#include <map>
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
// At most this many elements in one input (what 32-bit-indexed kernels address; also keeps the CPU interpreter's
// buffers within reach of a workstation).
inline constexpr int64_t kMaxInputElements = int64_t{1} << 31;
InputOverride parseInputOverride(const std::string& text);

// The LibTorch version kiln was built against ("2.11.0"), for `kiln --version`.
std::string libtorchVersion();

// Throws UserError for a missing/unreadable/non-TorchScript file, inputs without a shape (one line naming
// each, with an example --input), overrides that do not name an input (UsageError), or shapes the model
// cannot run with. `castTo` (--dtype) first casts the module's
// floating-point parameters and buffers, and its floating-point inputs, to f16 or bf16.
torch::Graph importModel(const std::string& path, const std::vector<InputOverride>& overrides,
                         std::optional<DType> castTo = std::nullopt);

// What `kiln inspect` shows of a model: read from the archive and its frozen forward, without input shapes.
struct ModelSummary {
  struct Tensors {
    int64_t count = 0, elements = 0, bytes = 0;
    std::map<std::string, int64_t> dtypes;  // "f32", "bf16", ... (torch's name for others) -> tensors
  };
  std::string name;             // the file's stem, as in the IR dumps
  bool inputsRecorded = false;  // the archive has kiln_inputs.json
  std::vector<InputSpec> inputs;      // the recorded inputs; else the forward's argument names, no shapes
  std::vector<std::string> examples;  // an example --input for each input (NAME=SHAPE:DTYPE)
  Tensors parameters, buffers;        // of the whole module, submodules included
  // Ops on input data, which kiln must lower (compare with tensor::supportedOps), and ops on constants and
  // shapes only, which the import evaluates with LibTorch: op -> number of nodes.
  std::map<std::string, int64_t> ops, folded;
  // The model's state (module buffers the forward writes in place, kiln/torch/ir.h State) and the in-place ops writing
  // them: op -> number of nodes.
  std::vector<std::string> states;
  std::map<std::string, int64_t> stateWrites;
};
// The in-place ops on the model's state the import makes functional (model_state.h).
inline const std::vector<std::string>& supportedStateWrites() {
  static const std::vector<std::string> ops = {"aten::index_copy_", "aten::copy_", "aten::add_", "aten::sub_",
                                               "aten::mul_", "aten::div_"};
  return ops;
}
ModelSummary inspectModel(const std::string& path);

// The names of the forward's arguments (after `self`), in order: what --input and kiln generate name inputs by. Loads
// the archive without freezing it (cheaper than inspectModel for a large model). UserError as importModel's.
std::vector<std::string> inputNames(const std::string& path);

// Runs the module's forward with LibTorch (on the GPU when onGpu) and returns its tensor outputs, tuples
// flattened in order. Inputs past the forward's arguments are the model's state, copied into its buffers first; the
// buffers' values after the forward are then returned after the outputs, as kiln returns them. The ground truth for `kiln run --check` and the tests. With castTo, the module's floating
// parameters are cast to that type first (`--dtype`). With inF32, the same rounded parameters and float inputs are
// then widened to f32 and the forward runs in f32 (the low-precision check's reference, DESIGN.md §4); casts the
// trace itself pins to bf16/f16 (constant dtype arguments) are made f32 casts for that run.
std::vector<HostTensor> runReference(const std::string& path, const std::vector<HostTensor>& inputs, bool onGpu,
                                     std::optional<DType> castTo = std::nullopt, bool inF32 = false);

// LibTorch's value of a TorchScript value inside the forward (torch::Value::traced names it), and the op that computes
// it with the line the user wrote ("aten::linear @ models/mlp.py:14").
struct TracedValue {
  HostTensor value;
  std::string op;
  std::string name;  // its name in the graph LibTorch ran ("%query.2")
};
// The forward as the import reads it (frozen and inlined; castTo and inF32 as runReference's), run by LibTorch on
// `inputs` with the values `names` (torch::Value::traced keys) as extra outputs: what `kiln run --check --bisect` compares kiln's buffers
// with. Names the graph does not have at its top level are left out of the result. A model with state (inputs past the
// forward's arguments) is refused with a UserError.
std::map<std::string, TracedValue> referenceIntermediates(const std::string& path, const std::vector<HostTensor>& inputs,
                                                          const std::vector<std::string>& names, bool onGpu,
                                                          std::optional<DType> castTo = std::nullopt, bool inF32 = false);

}  // namespace kiln::frontend
