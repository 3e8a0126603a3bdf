// torch.export archives (.pt2, torch.export.save) as TorchScript modules (src/frontend/exported_program.cpp). Private
// to src/frontend.
#pragma once
#include <caffe2/serialize/inline_container.h>
#include <torch/script.h>

#include <string>

namespace kiln::frontend {

// Whether the archive is one torch.export.save wrote (it has an `archive_format` record).
bool isExportArchive(caffe2::serialize::PyTorchStreamReader* archive);

// The program as a module: its parameters, buffers and constants the module's buffers, its graph the module's forward
// (ATen nodes in order, each overload found in LibTorch's registry, arguments in the schema's order), its user inputs
// the forward's arguments, recorded (names, static shapes, dtypes) in extra[kInputsFile] as models/kiln_export.py
// records a trace's. UserError, one line, for what kiln does not read: dynamic shapes, non-ATen nodes (higher-order ops
// such as the grad-mode wrapper a model's torch.no_grad() block becomes when exported outside no_grad, custom ops),
// outputs that change state, pickled weights, damaged records.
::torch::jit::Module loadExportedProgram(const std::string& path, caffe2::serialize::PyTorchStreamReader& archive,
                                         ::torch::jit::ExtraFilesMap& extra);

}  // namespace kiln::frontend
