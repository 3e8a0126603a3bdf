// LibTorch reference runs and tensor conversions for the frontend.
#include <filesystem>
#include <fstream>

#include "kiln/frontend/frontend.h"
#include "kiln/support/error.h"
#include "torch_util.h"
#include <torch/cuda.h>
#include <torch/version.h>

namespace kiln::frontend {

std::string firstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

::torch::jit::Module loadModule(const std::string& path, ::torch::jit::ExtraFilesMap& extra) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) userError("model file '{}' not found", path);
  if (!std::ifstream(path)) userError("model file '{}' cannot be read; check its permissions", path);
  try {
    return ::torch::jit::load(path, std::nullopt, extra);
  } catch (const std::exception& e) {
    userError("'{}' is not a readable TorchScript archive ({}); save the model with torch.jit.trace + torch.jit.save",
              path, firstLine(e.what()));
  }
}

at::ScalarType scalarType(DType t) {
  switch (t) {
    case DType::F32: return at::kFloat;
    case DType::F16: return at::kHalf;
    case DType::BF16: return at::kBFloat16;
    case DType::I64: return at::kLong;
    case DType::Bool: return at::kBool;
  }
  return at::kFloat;
}

void castModule(::torch::jit::Module& m, std::optional<DType> to) {
  if (!to) return;
  if (*to != DType::F16 && *to != DType::BF16 && *to != DType::F32)
    usageError("--dtype must be f32, f16 or bf16, not {}", dtypeName(*to));
  m.to(scalarType(*to));
}

at::Tensor toTorch(const HostTensor& t, bool onGpu) {
  at::Tensor f = ::torch::from_blob(const_cast<float*>(t.values.data()), t.shape, at::kFloat).clone();
  at::Tensor r = f.to(scalarType(t.dtype));
  return onGpu ? r.to(at::kCUDA) : r;
}

HostTensor fromTorch(const at::Tensor& t) {
  HostTensor h;
  switch (t.scalar_type()) {
    case at::kFloat: h.dtype = DType::F32; break;
    case at::kHalf: h.dtype = DType::F16; break;
    case at::kBFloat16: h.dtype = DType::BF16; break;
    case at::kLong: h.dtype = DType::I64; break;
    case at::kBool: h.dtype = DType::Bool; break;
    default: userError("reference output has unsupported dtype {}", c10::toString(t.scalar_type()));
  }
  h.shape = t.sizes().vec();
  at::Tensor f = t.detach().to(at::kCPU).to(at::kFloat).contiguous();
  h.values.assign(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
  return h;
}

std::vector<HostTensor> runReference(const std::string& path, const std::vector<HostTensor>& inputs, bool onGpu,
                                     std::optional<DType> castTo, bool inF32) {
  ::torch::jit::ExtraFilesMap extra;
  auto module = loadModule(path, extra);
  module.eval();
  castModule(module, castTo);
  if (inF32) module.to(at::kFloat);  // exact: every bf16/f16 value is an f32 value
  if (onGpu) {
    if (!::torch::cuda::is_available()) userError("LibTorch sees no CUDA device for the GPU reference run");
    module.to(at::kCUDA);
  }
  ::torch::NoGradGuard noGrad;
  std::vector<c10::IValue> args;
  for (const auto& t : inputs) {
    HostTensor widened = t;  // the values are already those of t's type
    if (inF32 && (t.dtype == DType::BF16 || t.dtype == DType::F16)) widened.dtype = DType::F32;
    args.push_back(toTorch(widened, onGpu));
  }
  c10::IValue out;
  try {
    out = module.forward(args);
  } catch (const std::exception& e) {
    userError("LibTorch's reference run of {} failed on the {} ({})", path, onGpu ? "GPU" : "CPU", firstLine(e.what()));
  }
  std::vector<HostTensor> result;
  std::function<void(const c10::IValue&)> flatten = [&](const c10::IValue& v) {
    if (v.isTensor()) result.push_back(fromTorch(v.toTensor()));
    else if (v.isTuple())
      for (const auto& e : v.toTupleRef().elements()) flatten(e);
    else if (v.isList())
      for (const auto& e : v.toListRef()) flatten(e);
    else userError("{}: forward returns a {}, kiln expects tensors or tuples of tensors", path, v.tagKind());
  };
  flatten(out);
  return result;
}

std::string libtorchVersion() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

}  // namespace kiln::frontend
