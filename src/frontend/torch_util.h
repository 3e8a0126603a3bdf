// Helpers shared by the frontend's LibTorch-facing files (private to src/frontend).
#pragma once
#include <torch/script.h>

#include <optional>
#include <string>

#include "kiln/support/host_tensor.h"

namespace kiln::frontend {

// Loads a TorchScript archive; UserError for a missing, unreadable or non-TorchScript file.
::torch::jit::Module loadModule(const std::string& path, ::torch::jit::ExtraFilesMap& extra);

at::Tensor toTorch(const HostTensor& t, bool onGpu);
at::ScalarType scalarType(DType t);
// --dtype: casts a module's floating-point parameters and buffers; UserError for a non-floating type.
void castModule(::torch::jit::Module& m, std::optional<DType> to);
HostTensor fromTorch(const at::Tensor& t);
std::string firstLine(const std::string& s);

}  // namespace kiln::frontend
