// Kernel IR text and JSON forms. The printer never throws on malformed IR (it is also used to dump the IR
// a failing pass or verifier saw): unknown parameter, shared buffer or float slot ids print as `?N`.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "kiln/kernel/ir.h"

namespace kiln::kernel {
namespace {

std::string floatName(const Kernel& k, int slot) {
  if (slot >= 0 && slot < static_cast<int>(k.floatVars.size())) return "%" + k.floatVars[slot];
  return fmt::format("%?{}", slot);
}

std::string pairName(const Kernel& k, int reg) {
  if (reg >= 0 && reg < static_cast<int>(k.pairVars.size())) return "$" + k.pairVars[reg];
  return fmt::format("$?{}", reg);
}

std::string paramName(const Kernel& k, int param) {
  if (param >= 0 && param < static_cast<int>(k.params.size())) return k.params[param].name;
  return fmt::format("?{}", param);
}

std::string sharedName(const Kernel& k, int buffer) {
  if (buffer >= 0 && buffer < static_cast<int>(k.shared.size())) return k.shared[buffer].name;
  return fmt::format("?{}", buffer);
}

std::string idxString(const Idx& e) { return e ? toString(e) : std::string("<null>"); }

std::string exprString(const Kernel& k, const FE& e) {
  if (!e) return "<null>";
  switch (e->kind) {
    case FExpr::Kind::Const: return fmt::format("{}", e->value);
    case FExpr::Kind::Var: return floatName(k, e->var);
    case FExpr::Kind::LoadGlobal: return fmt::format("load {}[{}]", paramName(k, e->param), idxString(e->index));
    case FExpr::Kind::LoadShared: return fmt::format("load shared {}[{}]", sharedName(k, e->shared), idxString(e->index));
    case FExpr::Kind::Select:
      return fmt::format("select({} < {}, {}, {})", idxString(e->index), idxString(e->bound), exprString(k, e->args[0]),
                         exprString(k, e->args[1]));
    case FExpr::Kind::Apply: {
      std::vector<std::string> args;
      for (auto& a : e->args) args.push_back(exprString(k, a));
      if (e->fn == Fn::Cast) return fmt::format("cast<{}>({})", dtypeName(e->castTo), fmt::join(args, ", "));
      return fmt::format("{}({})", tensor::fnName(e->fn), fmt::join(args, ", "));
    }
  }
  return "?";
}

void printBlock(const Kernel& k, const Block& body, int depth, std::vector<std::string>& lines) {
  std::string ind(2 * depth, ' ');
  for (auto& s : body) {
    switch (s.kind) {
      case Stmt::Kind::DefIdx:
        lines.push_back(fmt::format("{}{} = {}{}", ind, s.name, idxString(s.a), s.warpUniform ? "  (warp-uniform)" : ""));
        break;
      case Stmt::Kind::Assign:
        lines.push_back(fmt::format("{}{} = {}", ind, floatName(k, s.var), exprString(k, s.value)));
        break;
      case Stmt::Kind::For:
        lines.push_back(fmt::format("{}for {} in {}..{} step {} {{", ind, s.name, idxString(s.a), idxString(s.b), s.step));
        printBlock(k, s.body, depth + 1, lines);
        lines.push_back(ind + "}");
        break;
      case Stmt::Kind::If:
        lines.push_back(fmt::format("{}if ({} < {}) {{", ind, idxString(s.a), idxString(s.b)));
        printBlock(k, s.body, depth + 1, lines);
        lines.push_back(ind + "}");
        break;
      case Stmt::Kind::StoreGlobal:
        lines.push_back(fmt::format("{}store {}[{}] = {}", ind, paramName(k, s.target), idxString(s.a), exprString(k, s.value)));
        break;
      case Stmt::Kind::StoreShared:
        lines.push_back(
            fmt::format("{}store shared {}[{}] = {}", ind, sharedName(k, s.target), idxString(s.a), exprString(k, s.value)));
        break;
      case Stmt::Kind::Barrier: lines.push_back(ind + "barrier"); break;
      case Stmt::Kind::BlockTicket:
        lines.push_back(fmt::format("{}{} = ticket {}[{}] of {}", ind, s.name, paramName(k, s.param), idxString(s.a), s.arrivals));
        break;
      case Stmt::Kind::CounterRelease:
        lines.push_back(fmt::format("{}counter.release {}[{}]", ind, paramName(k, s.param), idxString(s.a)));
        break;
      case Stmt::Kind::CounterAwait:
        lines.push_back(fmt::format("{}counter.await {}[{}] == {}, then 0", ind, paramName(k, s.param), idxString(s.a), idxString(s.b)));
        break;
      case Stmt::Kind::ClusterBarrier: lines.push_back(ind + "cluster.barrier"); break;
      case Stmt::Kind::FenceMbarrierInit: lines.push_back(ind + "fence.mbarrier_init.cluster"); break;
      case Stmt::Kind::LoadVector: {
        std::vector<std::string> slots;
        for (int slot : s.fragment) slots.push_back(floatName(k, slot));
        lines.push_back(fmt::format("{}{} = load{} {}[{}]", ind, fmt::join(slots, ", "), s.fragment.size(), paramName(k, s.target),
                                    idxString(s.a)));
        break;
      }
      case Stmt::Kind::LoadSharedVector: {
        std::vector<std::string> slots;
        for (int slot : s.fragment) slots.push_back(floatName(k, slot));
        lines.push_back(fmt::format("{}{} = load{} shared {}[{}]", ind, fmt::join(slots, ", "), s.fragment.size(),
                                    sharedName(k, s.target), idxString(s.a)));
        break;
      }
      case Stmt::Kind::StoreVector: {
        std::vector<std::string> values;
        for (auto& v : s.values) values.push_back(exprString(k, v));
        lines.push_back(fmt::format("{}store{} {}[{}] = ({})", ind, s.values.size(), paramName(k, s.target), idxString(s.a),
                                    fmt::join(values, ", ")));
        break;
      }
      case Stmt::Kind::CpAsync:
        lines.push_back(fmt::format("{}cp.async{} shared {}[{}] <- {}[{}]{}", ind, s.bytes, sharedName(k, s.target), idxString(s.a),
                                    paramName(k, s.param), idxString(s.b),
                                    s.validBytes ? fmt::format(" valid {} bytes", idxString(s.validBytes)) : std::string()));
        break;
      case Stmt::Kind::Ldmatrix: {
        std::vector<std::string> slots;
        for (int slot : s.fragment) slots.push_back(floatName(k, slot));
        for (int r : s.pairRegs) slots.push_back(pairName(k, r));
        lines.push_back(fmt::format("{}{} = ldmatrix.x{}{} shared {}[{}]", ind, fmt::join(slots, ", "),
                                    s.pairRegs.empty() ? s.fragment.size() / 2 : s.pairRegs.size(),
                                    s.transpose ? ".trans" : "", sharedName(k, s.target), idxString(s.a)));
        break;
      }
      case Stmt::Kind::CpAsyncCommit: lines.push_back(ind + "cp.async.commit"); break;
      case Stmt::Kind::MbarrierInit:
        lines.push_back(fmt::format("{}mbarrier.init {}[{}], {} arrivals", ind, sharedName(k, s.target), idxString(s.a), s.arrivals));
        break;
      case Stmt::Kind::MbarrierArriveCluster:
        lines.push_back(fmt::format("{}mbarrier.arrive.cluster {}[{}]", ind, sharedName(k, s.target), idxString(s.a)));
        break;
      case Stmt::Kind::MbarrierArrive: lines.push_back(fmt::format("{}mbarrier.arrive {}[{}]", ind, sharedName(k, s.target), idxString(s.a))); break;
      case Stmt::Kind::CpAsyncMbarrierArrive:
        lines.push_back(fmt::format("{}cp.async.mbarrier.arrive {}[{}]", ind, sharedName(k, s.target), idxString(s.a)));
        break;
      case Stmt::Kind::MbarrierExpectTx:
        lines.push_back(fmt::format("{}{}mbarrier.arrive.expect_tx {}[{}], {} bytes", ind, s.elected ? "elected " : "",
                                    sharedName(k, s.target), idxString(s.a), s.txBytes));
        break;
      case Stmt::Kind::TmaLoad:
        lines.push_back(fmt::format("{}{}tma.load{} shared {}[{}] <- tmap{}[row {}, col {}] on {}[{}]", ind, s.elected ? "elected " : "",
                                    s.multicast ? ".multicast" : "", sharedName(k, s.target),
                                    idxString(s.a), s.tensorMap, idxString(s.coords[1]), idxString(s.coords[0]),
                                    sharedName(k, s.barriers), idxString(s.b)));
        break;
      case Stmt::Kind::NamedBarrier: lines.push_back(fmt::format("{}barrier {} of {} threads", ind, s.target, s.arrivals)); break;
      case Stmt::Kind::MbarrierWait:
        lines.push_back(fmt::format("{}mbarrier.wait {}[{}] parity {}", ind, sharedName(k, s.target), idxString(s.a), idxString(s.b)));
        break;
      case Stmt::Kind::CpAsyncWait: lines.push_back(fmt::format("{}cp.async.wait {}", ind, s.pendingGroups)); break;
      case Stmt::Kind::PackPair:
        lines.push_back(fmt::format("{}{} = pack.{} {}, {}", ind, pairName(k, s.pairRegs[0]), dtypeName(s.operandType),
                                    floatName(k, s.fragment[0]), floatName(k, s.fragment[1])));
        break;
      case Stmt::Kind::ShuffleXor:
        lines.push_back(fmt::format("{}{} = shfl.xor {}, {}", ind, floatName(k, s.var), floatName(k, s.srcSlot), s.laneMask));
        break;
      case Stmt::Kind::Mma: {
        if (!s.pairRegs.empty()) {  // A and B in pair registers
          std::vector<std::string> c, a, b;
          for (int slot : s.fragment) c.push_back(floatName(k, slot));
          for (size_t i = 0; i < s.pairRegs.size(); ++i) (i < 4 ? a : b).push_back(pairName(k, s.pairRegs[i]));
          lines.push_back(fmt::format("{}mma.m16n8k16.{} {{{}}} += {{{}}} x {{{}}}", ind, dtypeName(s.operandType), fmt::join(c, ", "),
                                      fmt::join(a, ", "), fmt::join(b, ", ")));
          break;
        }
        if (!s.pairs.empty()) {  // A and B pairs straight from shared memory
          auto pairs = [&](int buffer, size_t from, size_t n) {
            std::vector<std::string> at;
            for (size_t i = from; i < from + n; ++i) at.push_back(fmt::format("{}[{}]", sharedName(k, buffer), idxString(s.pairs[i])));
            return fmt::format("{}", fmt::join(at, ", "));
          };
          std::vector<std::string> c;
          for (int slot : s.fragment) c.push_back("%" + k.floatVars.at(static_cast<size_t>(slot)));
          lines.push_back(fmt::format("{}mma.m16n8k16.{} {{{}}} += pairs {{{}}} x pairs {{{}}}", ind, dtypeName(s.operandType),
                                      fmt::join(c, ", "), pairs(s.sharedA, 0, 4), pairs(s.sharedB, 4, 2)));
          break;
        }
        auto slots = [&](size_t from, size_t n) {
          std::vector<std::string> names;
          for (size_t i = from; i < from + n; ++i) names.push_back("%" + k.floatVars.at(static_cast<size_t>(s.fragment[i])));
          return fmt::format("{}", fmt::join(names, ", "));
        };
        lines.push_back(fmt::format("{}mma.m16n8k16.{} {{{}}} += {{{}}} x {{{}}}", ind, dtypeName(s.operandType), slots(12, 4),
                                    slots(0, 8), slots(8, 4)));
        break;
      }
      case Stmt::Kind::Wgmma: {
        // The accumulators as a range (there are up to 128): first .. last.
        std::string acc = s.fragment.empty() ? std::string("{}")
                                             : fmt::format("{{{} .. {}}}", floatName(k, s.fragment.front()), floatName(k, s.fragment.back()));
        std::string a = s.sharedA < 0 ? fmt::format("registers {} {} {} {}", pairName(k, s.pairRegs[0]), pairName(k, s.pairRegs[1]),
                                                    pairName(k, s.pairRegs[2]), pairName(k, s.pairRegs[3]))
                                      : fmt::format("shared {}[{}] (core matrices k {} row {})", sharedName(k, s.sharedA), idxString(s.a),
                                                    s.layoutA.kStride, s.layoutA.rowStride);
        lines.push_back(fmt::format("{}wgmma.m64n{}k16.{} {} {} {} x shared {}[{}] ({}core matrices k {} row {})", ind, s.wgmmaN,
                                    dtypeName(s.operandType), acc, s.scaleD ? fmt::format("+= (unless {} is 0)", idxString(s.scaleD)) : "+=",
                                    a, sharedName(k, s.sharedB), idxString(s.b), s.layoutB.mnMajor ? (s.layoutB.swizzle128 ? "mn-major 128-byte-swizzled " : "mn-major ") : "",
                                    s.layoutB.kStride, s.layoutB.rowStride));
        break;
      }
      case Stmt::Kind::WgmmaFence: lines.push_back(ind + "wgmma.fence"); break;
      case Stmt::Kind::WgmmaCommit: lines.push_back(ind + "wgmma.commit_group"); break;
      case Stmt::Kind::WgmmaWait: lines.push_back(fmt::format("{}wgmma.wait_group {}", ind, s.pendingGroups)); break;
      case Stmt::Kind::FenceProxyAsync: lines.push_back(ind + "fence.proxy.async.shared"); break;
    }
  }
}

std::string paramString(const Program& p, const Param& prm) {
  return fmt::format("{} {}: {}[{}]{}", prm.written ? "out" : "in", prm.name, dtypeName(prm.dtype), prm.elements,
                     prm.written ? " (written)" : "");
}

std::string tensorMapString(const Kernel& k, int i) {
  const TensorMap& m = k.tensorMaps[static_cast<size_t>(i)];
  return fmt::format("tmap{}: {}[{} + row * {} + col], {} rows x {} cols, boxes of {} x {}{}", i, paramName(k, m.param), m.offset,
                     m.rowStride, m.rows, m.cols, m.boxRows, m.boxCols, m.swizzle128 ? ", swizzle 128B" : "");
}

std::string dims(const std::array<int64_t, 3>& d) { return fmt::format("({},{},{})", d[0], d[1], d[2]); }

std::vector<std::string> bodyLines(const Kernel& k) {
  std::vector<std::string> lines;
  printBlock(k, k.body, 1, lines);
  return lines;
}

}  // namespace

std::string print(const Program& p) {
  std::string out = fmt::format("// kiln kernel IR: {}\n", p.modelName);
  for (auto& b : p.buffers) {
    out += fmt::format("buffer {} : {}[{}] {}", b.name, dtypeName(b.dtype), shapeString(b.shape), loop::bufferKindName(b.kind));
    if (b.weight) out += fmt::format(" \"{}\"", b.weight->name);
    out += "\n";
  }
  for (auto& k : p.kernels) {
    out += fmt::format("\nkernel {} grid{} block{} shared {} bytes", k.name, dims(k.grid), dims(k.block), k.sharedBytes());
    if (k.dynamicSharedBytes) out += fmt::format(" (dynamic {} bytes)", k.dynamicSharedBytes);
    if (k.cluster > 1) out += fmt::format(" cluster {}", k.cluster);
    if (k.groups > 1) out += fmt::format(" groups {}", k.groups);
    if (k.programmaticLaunch) out += " programmatic-launch";
    if (!k.origins.empty()) out += fmt::format("  // {}", fmt::join(k.origins, "; "));
    out += "\n";
    std::vector<std::string> params;
    for (auto& prm : k.params) params.push_back(paramString(p, prm));
    out += fmt::format("  params: {}\n", fmt::join(params, ", "));
    for (size_t i = 0; i < k.tensorMaps.size(); ++i) out += fmt::format("  {}\n", tensorMapString(k, static_cast<int>(i)));
    for (size_t i = 0; i < k.shared.size(); ++i) {
      const SharedBuffer& s = k.shared[i];
      out += fmt::format("  shared {}: {}[{}]", s.name, s.mbarriers ? "mbarrier" : dtypeName(s.dtype), s.elements);
      if (s.dynamic) out += fmt::format(" dynamic at byte {}", k.dynamicSharedOffset(static_cast<int>(i)));
      out += "\n";
    }
    if (!k.floatVars.empty()) {
      std::vector<std::string> fv;
      for (size_t i = 0; i < k.floatVars.size(); ++i) fv.push_back(floatName(k, static_cast<int>(i)));
      out += fmt::format("  floats: {}\n", fmt::join(fv, ", "));
    }
    if (!k.pairVars.empty()) {
      std::vector<std::string> pv;
      for (size_t i = 0; i < k.pairVars.size(); ++i) pv.push_back(pairName(k, static_cast<int>(i)));
      out += fmt::format("  pairs: {}\n", fmt::join(pv, ", "));
    }
    for (auto& line : bodyLines(k)) out += line + "\n";
  }
  std::vector<std::string> outs;
  for (int b : p.outputs)
    outs.push_back(b >= 0 && b < static_cast<int>(p.buffers.size()) ? p.buffers[b].name : fmt::format("?{}", b));
  out += fmt::format("\nreturn {}\n", fmt::join(outs, ", "));
  return out;
}

nlohmann::json toJson(const Program& p) {
  nlohmann::json j{{"level", "kernel"}, {"model", p.modelName}, {"inputs", p.inputs}, {"outputs", p.outputs}};
  j["buffers"] = nlohmann::json::array();
  for (auto& b : p.buffers) {
    nlohmann::json bj{{"name", b.name}, {"kind", loop::bufferKindName(b.kind)}, {"dtype", dtypeName(b.dtype)}, {"shape", b.shape}};
    if (b.weight) bj["weight"] = b.weight->name;
    j["buffers"].push_back(bj);
  }
  j["kernels"] = nlohmann::json::array();
  for (auto& k : p.kernels) {
    nlohmann::json kj{{"name", k.name},
                      {"grid", k.grid},
                      {"block", k.block},
                      {"shared_bytes", k.sharedBytes()},
                      {"dynamic_shared_bytes", k.dynamicSharedBytes},
                      {"origins", k.origins},
                      {"float_vars", k.floatVars}};
    if (!k.pairVars.empty()) kj["pair_vars"] = k.pairVars;
    if (k.cluster > 1) kj["cluster"] = k.cluster;
    if (k.groups > 1) kj["groups"] = k.groups;
    if (k.programmaticLaunch) kj["programmatic_launch"] = true;
    kj["params"] = nlohmann::json::array();
    for (auto& prm : k.params)
      kj["params"].push_back({{"buffer", prm.buffer},
                              {"name", prm.name},
                              {"dtype", dtypeName(prm.dtype)},
                              {"elements", prm.elements},
                              {"written", prm.written}});
    kj["shared"] = nlohmann::json::array();
    for (size_t i = 0; i < k.shared.size(); ++i) {
      const SharedBuffer& s = k.shared[i];
      nlohmann::json sj{{"name", s.name}, {"dtype", dtypeName(s.dtype)}, {"elements", s.elements}};
      if (s.dynamic) sj["dynamic_offset"] = k.dynamicSharedOffset(static_cast<int>(i));
      kj["shared"].push_back(sj);
    }
    for (size_t i = 0; i < k.tensorMaps.size(); ++i) kj["tensor_maps"].push_back(tensorMapString(k, static_cast<int>(i)));
    kj["body"] = bodyLines(k);
    j["kernels"].push_back(kj);
  }
  return j;
}

}  // namespace kiln::kernel
