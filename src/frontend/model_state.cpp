#include "model_state.h"

#include <algorithm>

namespace kiln::frontend {
namespace jit = ::torch::jit;

std::optional<std::string> attributePath(const jit::Value* v) {
  std::string path;
  while (v->node()->kind() == c10::prim::GetAttr) {
    const jit::Node* get = v->node();
    path = get->s(c10::attr::name) + (path.empty() ? "" : "." + path);
    v = get->input(0);
  }
  // The chain must end at the forward's own `self` (its graph's first input).
  if (path.empty() || v->node()->kind() != c10::prim::Param || v->offset() != 0) return std::nullopt;
  return path;
}

bool writesFirstOperand(const jit::Node* node) {
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (!schema || schema->arguments().empty()) return false;
  const c10::AliasInfo* alias = schema->arguments()[0].alias_info();
  return alias && alias->isWrite();
}

bool mayAliasFirstOperand(const jit::Node* node) {
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (!schema || schema->arguments().empty() || schema->returns().empty() || node->inputs().empty()) return false;
  const c10::AliasInfo* in = schema->arguments()[0].alias_info();
  const c10::AliasInfo* out = schema->returns()[0].alias_info();
  if (!in || !out) return false;
  for (const auto& set : out->beforeSets())
    if (in->beforeSets().count(set)) return true;
  return false;
}

std::optional<std::string> attributeBehind(const jit::Value* v) {
  for (int depth = 0; depth < 10000; ++depth) {
    if (auto path = attributePath(v)) return path;
    const jit::Node* producer = v->node();
    if (!mayAliasFirstOperand(producer)) return std::nullopt;
    v = producer->input(0);
  }
  return std::nullopt;
}

std::vector<std::string> stateNames(const jit::Graph& graph) {
  std::vector<std::string> written;
  for (const jit::Node* node : graph.nodes())
    if (writesFirstOperand(node))
      if (auto path = attributeBehind(node->input(0)))
        if (std::find(written.begin(), written.end(), *path) == written.end()) written.push_back(*path);
  std::vector<std::string> ordered;  // in the order of the first read
  for (const jit::Node* node : graph.nodes())
    if (node->kind() == c10::prim::GetAttr)
      if (auto path = attributePath(node->output()))
        if (std::find(written.begin(), written.end(), *path) != written.end() &&
            std::find(ordered.begin(), ordered.end(), *path) == ordered.end())
          ordered.push_back(*path);
  return ordered;
}

}  // namespace kiln::frontend
