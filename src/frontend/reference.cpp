// LibTorch reference runs and tensor conversions for the frontend.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <vector>
#include <fstream>

#include "kiln/frontend/frontend.h"
#include "kiln/support/error.h"
#include "exported_program.h"
#include "model_state.h"
#include "torch_util.h"
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/cuda.h>
#include <torch/version.h>

namespace kiln::frontend {

std::string firstLine(const std::string& s) {
  // LibTorch's messages may start with a newline ("\nArguments for call are not valid..."): the first line with text.
  size_t from = 0;
  while (from < s.size()) {
    const size_t end = std::min(s.find('\n', from), s.size());
    std::string line = s.substr(from, end - from);
    const size_t first = line.find_first_not_of(" \t\r");
    if (first != std::string::npos) return line.substr(first, line.find_last_not_of(" \t\r") - first + 1);
    from = end + 1;
  }
  return "no details";
}

// A cast the trace pins to its low-precision type (Gemma-2's eager attention, softmax(..., dtype=float32).to(bfloat16))
// would put that type back into the f32 run, where it fails ("expected scalar type Float but found BFloat16") or rounds.
int widenPinnedCasts(::torch::jit::Module& m) {
  namespace jit = ::torch::jit;
  int changed = 0;
  std::function<void(jit::Block*)> visit = [&](jit::Block* b) {
    for (jit::Node* n : b->nodes()) {
      for (jit::Block* sub : n->blocks()) visit(sub);
      const c10::FunctionSchema* schema = n->maybeSchema();
      if (!schema) continue;
      for (size_t i = 0; i < schema->arguments().size() && i < n->inputs().size(); ++i) {
        c10::TypePtr type = schema->arguments()[i].real_type();
        if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
        if (type->kind() != c10::TypeKind::ScalarTypeType) continue;
        std::optional<c10::IValue> value = jit::toIValue(n->input(i));
        if (!value || !value->isInt()) continue;
        const auto t = static_cast<at::ScalarType>(value->toInt());
        if (t != at::kBFloat16 && t != at::kHalf) continue;
        jit::WithInsertPoint here(n);
        n->replaceInput(i, n->owningGraph()->insertConstant(static_cast<int64_t>(at::kFloat)));
        ++changed;
      }
    }
  };
  for (const jit::Module& sub : m.modules())  // the module itself first
    for (const jit::Method& method : sub.get_methods()) visit(method.graph()->block());
  return changed;
}

namespace {

// Every int in an int list anywhere inside v lies in [0, size): in a debug record's source ranges the only int lists
// are the text-table indices of each source's pieces.
// A list typed as ints whose elements are not all ints is damaged too (reading it as ints aborted the process: found by
// fuzz/pt_fuzzer.cpp; its input is in fuzz/regressions/pt/).
bool intListsWithin(const c10::IValue& v, size_t size, int depth = 0) {
  if (depth > 64) return false;
  if (v.isTuple()) {
    for (const c10::IValue& e : v.toTupleRef().elements())
      if (!intListsWithin(e, size, depth + 1)) return false;
    return true;
  }
  if (v.isList()) {  // typed int lists and generic lists alike, element by element
    const bool ints = v.isIntList();
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isInt()) {
        if (e.toInt() < 0 || static_cast<uint64_t>(e.toInt()) >= size) return false;
      } else if (ints || !intListsWithin(e, size, depth + 1)) {
        return false;
      }
    }
  }
  return true;
}

// The archive's debug records (code/....py.debug_pkl: where each piece of the serialized code came from) are read by
// LibTorch's loader, which indexes the record's text table with the record's own numbers unchecked: a damaged record
// crashed it (found by fuzz/pt_fuzzer.cpp). Each is unpickled here first and its text-table indices checked; a
// record that cannot be read or indexes past its table is a one-line error. Records in the older format (no table)
// hold their text inline and need no check.
void checkDebugRecords(const std::string& path, caffe2::serialize::PyTorchStreamReader* reader) {
  if (!reader) return;  // not a zip archive: LibTorch's loader says so, in the caller's words
  std::vector<std::pair<std::string, c10::IValue>> records;
  std::string current;
  try {
    for (const std::string& name : reader->getAllRecords()) {
      if (name.size() < 10 || name.compare(name.size() - 10, 10, ".debug_pkl") != 0) continue;
      current = name;
      auto [data, size] = reader->getRecord(name);
      records.emplace_back(name, ::torch::jit::unpickle(static_cast<const char*>(data.get()), size));
    }
  } catch (const std::exception& e) {
    userError("'{}' is damaged: its debug record {} cannot be read ({}); export the model again", path, printable(current),
              firstLine(e.what()));
  }
  for (const auto& [name, value] : records) {
    if (!value.isTuple()) continue;  // LibTorch refuses other shapes itself, with an error
    const auto& top = value.toTupleRef().elements();
    if (top.size() != 3 || !top[0].isString() || top[0].toStringRef() != "FORMAT_WITH_STRING_TABLE") continue;
    const size_t table = top[1].isTuple() ? top[1].toTupleRef().elements().size() : 0;
    if (!intListsWithin(top[2], table))
      userError("'{}' is damaged: its debug record {} points past its text table; export the model again", path,
                printable(name));
  }
}

// The tensor attribute at `path` ("w.key_cache_0") of module m: a model state's buffer.
at::Tensor stateBuffer(const ::torch::jit::Module& m, const std::string& path) {
  ::torch::jit::Module owner = m;
  size_t from = 0;
  for (size_t dot = path.find('.'); dot != std::string::npos; from = dot + 1, dot = path.find('.', from))
    owner = owner.attr(path.substr(from, dot - from)).toModule();
  return owner.attr(path.substr(from)).toTensor();
}

}  // namespace

::torch::jit::Module loadModule(const std::string& path, ::torch::jit::ExtraFilesMap& extra) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) userError("model file '{}' not found", path);
  if (!std::ifstream(path)) userError("model file '{}' cannot be read; check its permissions", path);
  const auto archive = openArchive(path);  // one reader for the checks of its records
  if (isExportArchive(archive.get())) return loadExportedProgram(path, *archive, extra);
  refuseOtherFormats(path, archive.get());
  checkPickleRecords(path, archive.get());  // before anything unpickles them
  checkDebugRecords(path, archive.get());
  checkConstantRecords(path, archive.get());
  ::torch::jit::Module m;
  try {
    m = ::torch::jit::load(path, std::nullopt, extra);
  } catch (const std::exception& e) {
    userError("'{}' is not a readable TorchScript archive ({}); save the model with torch.jit.trace + torch.jit.save",
              path, firstLine(e.what()));
  }
  checkTensorRecords(path, archive.get(), m);
  return m;
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
  // Floating-point parameters and buffers only: a bool mask or i64 positions kept as a buffer stay what they are
  // (Module::to would cast them too: a bool mask to bf16 breaks `~mask`, i64 positions lose their exactness).
  const at::ScalarType type = scalarType(*to);
  auto cast = [&](const at::Tensor& t) {
    if (t.is_floating_point()) t.set_data(t.to(type));
  };
  for (const at::Tensor& p : m.parameters(/*recurse=*/true)) cast(p);
  for (const at::Tensor& b : m.buffers(/*recurse=*/true)) cast(b);
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
  if (inF32) {
    castModule(module, DType::F32);  // exact: every bf16/f16 value is an f32 value (bool and integer buffers stay)
    widenPinnedCasts(module);
  }
  if (onGpu) {
    if (!::torch::cuda::is_available()) userError("LibTorch sees no CUDA device for the GPU reference run");
    module.to(at::kCUDA);
  }
  ::torch::NoGradGuard noGrad;
  // Inputs past the forward's own arguments are the model's state (model_state.h), set into its buffers first; their
  // values after the forward close the outputs, as kiln's do.
  // Only then is the module frozen a second time (to find the state's buffers as the import does): a stateless
  // model's reference run costs one load, as before.
  const size_t arguments = module.get_method("forward").graph()->inputs().size() - 1;
  std::vector<std::string> states;
  if (inputs.size() > arguments) {
    ::torch::jit::ExtraFilesMap noExtra;
    states = stateNames(*loadForward(path, noExtra, castTo).graph);
    if (inputs.size() != arguments + states.size())
      userError("{}: {} inputs given for {} arguments and {} states", path, inputs.size(), arguments, states.size());
  }
  std::vector<c10::IValue> args;
  for (const auto& t : inputs) {
    HostTensor widened = t;  // the values are already those of t's type
    if (inF32 && (t.dtype == DType::BF16 || t.dtype == DType::F16)) widened.dtype = DType::F32;
    args.push_back(toTorch(widened, onGpu));
  }
  for (size_t i = 0; i < states.size(); ++i) stateBuffer(module, states[i]).copy_(args[arguments + i].toTensor());
  args.resize(std::min(args.size(), arguments));
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
    else if (v.isGenericDict())  // in insertion order, as the import takes a prim::DictConstruct's values
      for (const auto& e : v.toGenericDict()) flatten(e.value());
    else userError("{}: forward returns a {}, kiln expects tensors, or tuples, lists or dicts of tensors", path, v.tagKind());
  };
  flatten(out);
  for (const std::string& state : states) result.push_back(fromTorch(stateBuffer(module, state)));
  return result;
}

std::string libtorchVersion() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

}  // namespace kiln::frontend
