#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <nlohmann/json.hpp>

#include "kiln/loop/ir.h"

namespace kiln::loop {
namespace {

// Prints expressions as numbered lines, each distinct subexpression once.
struct ExprPrinter {
  const Program& p;
  std::string& out;
  std::string indent;
  std::map<std::string, std::string> seen;
  int& counter;

  std::string operator()(const ExprP& e) {
    if (e->kind == Expr::Kind::Imm) return fmt::format("{}", e->imm);
    if (e->kind == Expr::Kind::Acc) return fmt::format("acc{}", e->stage);
    std::string key = exprKey(e);
    if (auto it = seen.find(key); it != seen.end()) return it->second;
    std::string rhs;
    if (e->kind == Expr::Kind::Select) {
      std::string a = (*this)(e->args[0]), b = (*this)(e->args[1]);
      rhs = fmt::format("select({} < {}, {}, {})", toString(e->index[0]), toString(e->index[1]), a, b);
    } else if (e->kind == Expr::Kind::Load) {
      std::vector<std::string> idx;
      for (auto& i : e->index) idx.push_back(toString(i));
      rhs = fmt::format("load {}[{}]", p.buffers[e->buffer].name, fmt::join(idx, ", "));
    } else {
      std::vector<std::string> args;
      for (auto& a : e->args) args.push_back((*this)(a));
      rhs = fmt::format("{}({})", tensor::fnName(e->fn), fmt::join(args, ", "));
      if (e->fn == Fn::Cast) rhs += fmt::format(" to {}", dtypeName(e->castTo));
    }
    std::string name = fmt::format("%{}", counter++);
    out += fmt::format("{}{} = {}\n", indent, name, rhs);
    seen[key] = name;
    return name;
  }
};

std::string axesString(const std::vector<Axis>& axes) {
  std::vector<std::string> s;
  for (auto& a : axes) s.push_back(fmt::format("{} < {}", a.name, a.extent));
  return fmt::format("{}", fmt::join(s, ", "));
}

}  // namespace

std::string printBuffers(const Program& p) {
  std::string out;
  for (auto& b : p.buffers) {
    out += fmt::format("buffer {} : {}[{}] {}", b.name, dtypeName(b.dtype), shapeString(b.shape), bufferKindName(b.kind));
    if (b.weight) out += fmt::format(" \"{}\"", b.weight->name);
    out += "\n";
  }
  return out;
}

std::string printReturn(const Program& p) {
  std::vector<std::string> outs;
  for (int b : p.outputs) outs.push_back(p.buffers[b].name);
  return fmt::format("return {}\n", fmt::join(outs, ", "));
}

std::string print(const Program& p) {
  std::string out = fmt::format("// kiln loop IR: {}\n", p.modelName) + printBuffers(p);
  for (auto& k : p.kernels) {
    const Buffer& o = p.buffers[k.output];
    out += fmt::format("\nkernel {} writes {}  // {}\n", k.name, o.name, fmt::join(k.origins, "; "));
    out += printKernelBody(p, k);
  }
  return out + "\n" + printReturn(p);
}

std::string printKernelBody(const Program& p, const Kernel& k) {
  std::string out;
  const Buffer& o = p.buffers[k.output];
  {
    int counter = 0;
    std::string indent = "  ";
    bool rows = (!k.stages.empty() || k.attention) && k.rowAxes < static_cast<int>(k.parallel.size());
    if (rows) {
      std::vector<Axis> rowAxes(k.parallel.begin(), k.parallel.begin() + k.rowAxes);
      out += fmt::format("  for {} rows:\n", rowAxes.empty() ? std::string("a single row") : axesString(rowAxes));
    } else {
      out += fmt::format("  for {} parallel:\n", axesString(k.parallel));
    }
    for (size_t s = 0; s < k.stages.size(); ++s) {
      const Reduction& r = k.stages[s];
      out += fmt::format("{}  acc{} = {}\n", indent, s, r.fn == ReduceFn::Sum ? "0" : "-inf");
      out += fmt::format("{}  for {} reduce:\n", indent, axesString(r.axes));
      ExprPrinter inner{p, out, indent + "    ", {}, counter};
      std::string v = inner(r.value);
      out += fmt::format("{}    acc{} = {}(acc{}, {})\n", indent, s, tensor::reduceName(r.fn), s, v);
    }
    if (k.attention) {
      const OnlineSoftmax& a = *k.attention;
      out += fmt::format("{}  online softmax over {} < {}{}:\n", indent, a.key.name, a.key.extent,
                         a.emptyRowsZero ? " (empty rows 0)" : "");
      out += fmt::format("{}    acc0 = 0\n{}    for {} reduce:\n", indent, indent, axesString(a.dot.axes));
      ExprPrinter dot{p, out, indent + "      ", {}, counter};
      std::string d = dot(a.dot.value);
      out += fmt::format("{}      acc0 = sum(acc0, {})\n", indent, d);
      ExprPrinter score{p, out, indent + "    ", {}, counter};
      out += fmt::format("{}    score = {}\n", indent, score(a.score));
    }
    if (rows) {
      std::vector<Axis> inner(k.parallel.begin() + k.rowAxes, k.parallel.end());
      out += fmt::format("    for {} parallel:\n", axesString(inner));
      indent += "  ";
    }
    ExprPrinter outer{p, out, indent + "  ", {}, counter};
    if (k.attention) {
      std::string v = outer(k.attention->value);
      out += fmt::format("{}  acc0 = softmax-weighted sum over {} of {}\n", indent, k.attention->key.name, v);
    }
    std::string r = outer(k.result);
    std::vector<std::string> idx;
    for (auto& a : k.parallel) idx.push_back(a.name);
    out += fmt::format("{}  store {}[{}] = {}\n", indent, o.name, fmt::join(idx, ", "), r);
    if (k.readOnlyAt) out += fmt::format("  read only at {} = {}\n", k.parallel[0].name, toString(k.readOnlyAt->group));
  }
  return out;
}

nlohmann::json toJson(const Program& p) {
  nlohmann::json j{{"level", "loop"}, {"model", p.modelName}, {"inputs", p.inputs}, {"outputs", p.outputs}};
  for (auto& b : p.buffers)
    j["buffers"].push_back({{"name", b.name}, {"kind", bufferKindName(b.kind)}, {"dtype", dtypeName(b.dtype)}, {"shape", b.shape}});
  j["kernels"] = nlohmann::json::array();
  for (auto& k : p.kernels) {
    nlohmann::json kj{{"name", k.name}, {"output", k.output}, {"origins", k.origins}};
    for (auto& a : k.parallel) kj["parallel"].push_back({{"name", a.name}, {"extent", a.extent}});
    kj["row_axes"] = k.rowAxes;
    kj["stages"] = nlohmann::json::array();
    for (auto& s : k.stages) {
      nlohmann::json sj{{"fn", tensor::reduceName(s.fn)}, {"value", exprKey(s.value)}};
      for (auto& a : s.axes) sj["axes"].push_back({{"name", a.name}, {"extent", a.extent}});
      kj["stages"].push_back(sj);
    }
    if (k.attention) {
      const OnlineSoftmax& a = *k.attention;
      nlohmann::json aj{{"key", {{"name", a.key.name}, {"extent", a.key.extent}}}, {"dot", exprKey(a.dot.value)},
                        {"score", exprKey(a.score)}, {"value", exprKey(a.value)}};
      if (a.emptyRowsZero) aj["empty_rows_zero"] = true;
      for (auto& d : a.dot.axes) aj["depth"].push_back({{"name", d.name}, {"extent", d.extent}});
      kj["attention"] = aj;
    }
    kj["result"] = exprKey(k.result);
    if (k.readOnlyAt) kj["read_only_at"] = {{"row_axis", k.readOnlyAt->rowAxis}, {"group", toString(k.readOnlyAt->group)}};
    j["kernels"].push_back(kj);
  }
  return j;
}

}  // namespace kiln::loop
