// How the frontend finds a model's inputs (private to src/frontend). Names come from the forward's
// arguments (skipping `self`), so a plain `torch.jit.trace(model, (x,)).save(path)` is accepted; shapes
// and dtypes from the archive's extra file `kiln_inputs.json` when it has one (models/kiln_export.py writes
// it), else from --input NAME=SHAPE[:DTYPE] (dtype f32 unless given). --input overrides a recorded input.
#pragma once
#include <torch/script.h>

#include <optional>
#include <string>
#include <vector>

#include "kiln/frontend/frontend.h"

namespace kiln::frontend {

inline constexpr const char* kInputsFile = "kiln_inputs.json";

// The names of forward's arguments after `self`.
std::vector<std::string> forwardArgumentNames(const ::torch::jit::Module& m);

// The inputs kiln_inputs.json records (empty when the archive has none); UserError if it is malformed.
std::vector<InputSpec> recordedInputs(const std::string& path, const std::string& json);

// Every input's name, shape and dtype: the recorded ones, else the forward's argument names, with the
// overrides applied. `graph` is the frozen, inlined forward (inputs: self, then the arguments). Throws
// UsageError for an override naming no input; UserError for a record that does not match the forward, and
// for inputs left without a shape: one line naming each of them with an example --input.
std::vector<InputSpec> resolveInputs(const std::string& path, const ::torch::jit::Module& module,
                                     const ::torch::jit::Graph& graph, const std::string& recordedJson,
                                     const std::vector<InputOverride>& overrides);

// An example --input for the graph's argument `index` (0: the first after self), guessed from its first
// users: i64 token ids for aten::embedding's indices, the feature size of a linear or matmul's constant
// weight. "x=1x8x64:f32" when nothing tells.
std::string exampleInput(const ::torch::jit::Graph& graph, size_t index, const std::string& name);

}  // namespace kiln::frontend
