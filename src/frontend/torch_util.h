// Helpers shared by the frontend's LibTorch-facing files (private to src/frontend).
#pragma once
#include <caffe2/serialize/inline_container.h>
#include <torch/script.h>

#include <functional>
#include <memory>
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

// A module's forward as kiln reads it: evaluated, cast (--dtype), frozen (parameters become constants),
// inlined. UserError if it cannot be frozen. `beforeFreeze` changes the cast module first (the f32 evaluation of
// a bf16 model, a move to the GPU); its values' names in `graph` stay those the import reads.
struct Forward {
  ::torch::jit::Module module, frozen;
  std::shared_ptr<::torch::jit::Graph> graph;
};
Forward loadForward(const std::string& path, ::torch::jit::ExtraFilesMap& extra, std::optional<DType> castTo,
                    const std::function<void(::torch::jit::Module&)>& beforeFreeze = {});
// A TorchScript value of the forward, as torch::Value::traced records it and referenceIntermediates finds it again in
// a forward loaded with other casts: "KIND#N.I", output I of the N-th node (counted from 1, constants left out: the f32
// evaluation inserts some, and value names are renumbered with them) of kind KIND.
std::string tracedValueKey(const ::torch::jit::Node* node, int64_t ordinal, const ::torch::jit::Value* output);

// The f32 evaluation of a bf16/f16 trace (runReference's inF32): every constant ScalarType argument naming bf16 or
// f16, in every method of every submodule, becomes f32. Returns how many changed.
int widenPinnedCasts(::torch::jit::Module& m);

// Ops whose result follows from their operands' shapes alone (aten::size, ...): folded even on input data.
bool shapeOnly(const ::torch::jit::Node* node);
// Ops whose result depends on their tensor operands' shape and dtype only (new_ones, zeros_like, full_like, ...):
// constants once the input shapes are fixed.
bool metadataOnly(const ::torch::jit::Node* node);
std::string firstLine(const std::string& s);
// The checks below read the archive at `path` through one record reader, `archive` (openArchive; nullptr for a file that
// is not a zip archive: the checks before the load then do nothing and LibTorch's loader says so, in its words).
// Every pickle record (data.pkl, constants.pkl, .debug_pkl) stores into its memo slots in order (pickle_scan.cpp);
// UserError naming the record otherwise.
void checkPickleRecords(const std::string& path, caffe2::serialize::PyTorchStreamReader* archive);
// The tensors lie inside their storages and records (tensor_records.cpp); UserError naming the tensor otherwise.
// checkConstantRecords reads the code's tensor constants (constants.pkl) and runs before torch::jit::load, whose constant
// pooling reads them; checkTensorRecords takes the loaded module's attributes.
void checkConstantRecords(const std::string& path, caffe2::serialize::PyTorchStreamReader* archive);
void checkTensorRecords(const std::string& path, caffe2::serialize::PyTorchStreamReader* archive, const ::torch::jit::Module& m);
// A file PyTorch writes that is not a TorchScript archive (a torch.export .pt2, a torch.save checkpoint, a pickle):
// UserError naming what it is and how to save a trace instead (other_formats.cpp); nothing for anything else.
void refuseOtherFormats(const std::string& path, caffe2::serialize::PyTorchStreamReader* archive);
// The archive's record reader; nullptr for a file that is not a zip archive (pickle_scan.cpp).
std::unique_ptr<caffe2::serialize::PyTorchStreamReader> openArchive(const std::string& path);

}  // namespace kiln::frontend
