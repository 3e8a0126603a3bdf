// What the import evaluates and records of each TorchScript node (import_eval.h).
#include "import_eval.h"

#include <filesystem>
#include <functional>
#include <optional>
#include <tuple>
#include <unordered_set>

#include "kiln/support/error.h"

namespace kiln::frontend {
namespace jit = ::torch::jit;
using kiln::torch::Scalar;
using kiln::torch::SourceLoc;

namespace {

// A line of the archive's generated code ("___torch_mangle_N.py"), which an op inlined from a submodule records: its
// call sites are tried instead.
bool generated(const std::string& file) { return file.find("___torch_mangle") != std::string::npos || file.rfind("code/", 0) == 0; }

}  // namespace

SourceLoc sourceLoc(const jit::Node* node) {
  SourceLoc loc;
  std::vector<jit::SourceRange> candidates{node->sourceRange()};
  if (auto cs = node->callstack()) {
    auto frames = (*cs)->vec();
    for (auto it = frames.rbegin(); it != frames.rend(); ++it) candidates.push_back(std::get<1>(*it));
  }
  std::optional<std::tuple<std::string, size_t, size_t>> flc;
  for (auto& r : candidates) {
    auto f = r.file_line_col();
    if (!f) continue;
    if (!flc) flc = f;
    if (!generated(std::get<0>(*f))) {
      flc = f;
      break;
    }
  }
  if (!flc) return loc;
  auto [file, line, col] = *flc;
  // Keep paths stable across checkouts: start them at the models/ directory where there is one.
  auto pos = file.rfind("models/");
  loc.file = pos == std::string::npos ? std::filesystem::path(file).filename().string() : file.substr(pos);
  loc.line = static_cast<int>(line);
  return loc;
}

Scalar toScalar(const c10::IValue& v, const jit::Node* node) {
  if (v.isNone()) return kiln::torch::None{};
  if (v.isBool()) return v.toBool();
  if (v.isInt()) return v.toInt();
  if (v.isDouble()) return v.toDouble();
  if (v.isIntList()) return v.toIntVector();
  if (v.isDoubleList()) return v.toDoubleVector();
  if (v.isString()) return v.toStringRef();
  if (v.isDevice()) return v.toDevice().str();
  if (v.isBoolList()) {
    std::vector<int64_t> out;
    for (bool b : v.toBoolList()) out.push_back(b);
    return out;
  }
  userError("{} at {} produces a {} value kiln cannot represent as a constant", node->kind().toQualString(),
            sourceLoc(node).str(), v.tagKind());
}

c10::IValue makeList(const jit::Stack& elems, const jit::Node* node) {
  auto elemType = node->output()->type()->expectRef<c10::ListType>().getElementType();
  c10::impl::GenericList list(elemType);
  for (const auto& e : elems) list.push_back(e);
  return list;
}

// Work on input data only needs its result's shape and dtype here: it runs on "meta" tensors, which carry
// both and compute nothing (a 1.1B-parameter forward costs no time). An op without a meta kernel runs on
// zero-filled tensors of the same shapes instead.
static c10::IValue mapTensors(const c10::IValue& v, const std::function<at::Tensor(const at::Tensor&)>& f) {
  if (v.isTensor()) return f(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorVector()) out.push_back(f(t));
    return out;
  }
  if (v.isList()) {
    auto list = v.toList();
    c10::impl::GenericList out(list.elementType());
    for (const c10::IValue& e : list) out.push_back(mapTensors(e, f));
    return out;
  }
  return v;
}

void evaluateOnMeta(const jit::Node* node, jit::Stack& stack) {
  auto toMeta = [](const at::Tensor& t) { return t.is_meta() ? t : t.to(at::kMeta); };
  jit::Stack meta;
  for (const auto& v : stack) meta.push_back(mapTensors(v, toMeta));
  try {
    node->getOperation()(meta);
    stack = std::move(meta);
    return;
  } catch (const std::exception&) {  // no meta kernel (embedding and sdpa in torch 2.11): run it for real
  }
  if (node->kind() == c10::aten::histc && !stack.empty() && stack[0].isTensor()) {
    // No meta kernel, and its CPU kernel takes no integers (a trace made on the GPU counts int32 expert ids): the
    // result is `bins` counts in the input's dtype.
    const int64_t bins = stack.size() > 1 && stack[1].isInt() ? stack[1].toInt() : 100;
    stack = {at::empty({bins}, stack[0].toTensor().options().device(at::kMeta))};
    return;
  }
  // Zeros on the device of the op's other operands (a trace made on the GPU keeps its weights there).
  at::Device device = at::kCPU;
  for (const auto& v : stack)
    mapTensors(v, [&](const at::Tensor& t) {
      if (!t.is_meta()) device = t.device();
      return t;
    });
  // Zeros first; ones where zeros fail (an integer division by a tensor of zeros throws where the model's divisors
  // do not).
  for (const bool ones : {false, true}) {
    auto toReal = [&](const at::Tensor& t) {
      return t.is_meta() ? (ones ? at::ones(t.sizes(), t.options().device(device)) : at::zeros(t.sizes(), t.options().device(device)))
                         : t;
    };
    jit::Stack real;
    for (const auto& v : stack) real.push_back(mapTensors(v, toReal));
    try {
      node->getOperation()(real);
    } catch (const std::exception&) {
      if (!ones) continue;
      throw;
    }
    for (auto& v : real) v = mapTensors(v, toMeta);
    stack = std::move(real);
    return;
  }
}

bool metadataOnly(const jit::Node* node) {
  static const std::unordered_set<std::string> ops = {"aten::new_ones", "aten::new_zeros", "aten::new_full",
                                                       "aten::zeros_like", "aten::ones_like", "aten::full_like",
                                                       "aten::new_empty", "aten::empty_like"};
  return ops.count(node->kind().toQualString()) > 0;
}

bool shapeOnly(const jit::Node* node) {
  static const std::unordered_set<std::string> ops = {"aten::size", "aten::dim", "aten::numel", "prim::device",
                                                       "prim::dtype", "aten::len"};
  return ops.count(node->kind().toQualString()) > 0;
}

}  // namespace kiln::frontend
