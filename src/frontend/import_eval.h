// The import's per-node helpers (src/frontend/import.cpp): where a node came from, its constant operands as Torch-IR
// scalars, and its evaluation on meta tensors. Private to src/frontend.
#pragma once
#include <torch/script.h>

#include "kiln/torch/ir.h"
#include "torch_util.h"

namespace kiln::frontend {

// The Python line the user wrote: a traced op's own, or for an op inlined from a submodule (whose line is in the
// archive's generated code) the nearest call site the user wrote.
torch::SourceLoc sourceLoc(const ::torch::jit::Node* node);

// A constant operand as a Torch-IR scalar; UserError for a value kiln cannot represent.
torch::Scalar toScalar(const c10::IValue& v, const ::torch::jit::Node* node);

// The list prim::ListConstruct makes of `elems`, typed as the node's output.
c10::IValue makeList(const ::torch::jit::Stack& elems, const ::torch::jit::Node* node);

// Runs `node` on meta tensors standing for `stack`'s (shapes and dtypes only), or on zeros of their shapes where the
// op has no meta kernel; the results replace the operands on `stack`, as meta tensors.
void evaluateOnMeta(const ::torch::jit::Node* node, ::torch::jit::Stack& stack);

}  // namespace kiln::frontend
