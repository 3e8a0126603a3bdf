// Model state (DESIGN.md §7 "Generation"): module buffers that a forward changes in place, such as the static KV
// cache of transformers' TorchExportableModuleWithStaticCache (key_cache_i and value_cache_i written with
// aten::index_copy_, the cumulative_length_i counters with aten::copy_ and aten::add_). Freezing keeps such buffers as
// module attributes (prim::GetAttr) because they change; everything else the module holds becomes a constant.
//
// kiln compiles the forward as a function of its inputs and the state's current values that returns its outputs and
// the state's new values: each in-place write becomes a new version of the state (a functional op), a later read sees
// the latest version, and the last version of each state is an extra output. Private to src/frontend.
#pragma once
#include <torch/script.h>

#include <optional>
#include <string>
#include <vector>

namespace kiln::frontend {

// The attribute path of a module attribute read with a chain of prim::GetAttr from the forward's `self`
// ("w.key_cache_0"); nullopt for any other value.
std::optional<std::string> attributePath(const ::torch::jit::Value* v);

// Whether `node` writes its first operand in place (its schema marks argument 0 as written: add_, copy_, index_copy_).
bool writesFirstOperand(const ::torch::jit::Node* node);

// Whether the node's result may share its first operand's memory (a view such as slice or reshape, a `to` that
// changes nothing, detach, and every in-place op, which returns its operand).
bool mayAliasFirstOperand(const ::torch::jit::Node* node);

// The module attribute `v` is or views, following in-place results and views back to a prim::GetAttr; nullopt when
// `v` is not a module attribute's memory.
std::optional<std::string> attributeBehind(const ::torch::jit::Value* v);

// The module's state: the attributes the graph writes in place, directly or through a value sharing their memory,
// in the order the graph first reads them. The import's state inputs and outputs follow this order, and so do
// LibTorch's reference runs (runReference), which set and read the same buffers.
std::vector<std::string> stateNames(const ::torch::jit::Graph& graph);

}  // namespace kiln::frontend
