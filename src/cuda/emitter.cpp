// cuda-emit: prints Kernel IR as CUDA C++.
#include "kiln/cuda/emitter.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "kiln/kernel/operand_layout.h"
#include "kiln/support/error.h"

namespace kiln::cuda {
namespace {

std::string cIdentifier(const std::string& name, std::set<std::string>& used) {
  std::string s;
  for (char c : name) s += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) s = "b_" + s;
  std::string unique = s;
  for (int n = 1; used.count(unique); ++n) unique = fmt::format("{}_{}", s, n);
  used.insert(unique);
  return unique;
}

std::string floatLiteral(float v) {
  if (v == std::numeric_limits<float>::infinity()) return "__int_as_float(0x7f800000)";
  if (v == -std::numeric_limits<float>::infinity()) return "__int_as_float(0xff800000)";
  if (v != v) return "__int_as_float(0x7fffffff)";
  std::string s = fmt::format("{:.9g}", v);  // 9 significant digits round-trip every float
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s + "f";
}

class Emitter {
 public:
  Emitter(const kernel::Program& p, const kernel::Kernel& k) : p_(p), k_(k) {}

  std::string run() {
    std::set<std::string> used;
    // Parameters are named by role (out, in0, in1, ...), not by buffer, so that the same op in every decoder
    // layer prints the same code and compiles once; the header comment maps them to buffers.
    int inputs = 0;
    for (auto& prm : k_.params) params_.push_back(cIdentifier(prm.written ? "out" : fmt::format("in{}", inputs++), used));
    for (auto& s : k_.shared) shared_.push_back(cIdentifier(s.name, used));
    for (auto& f : k_.floatVars) floats_.push_back(cIdentifier(f, used));
    for (auto& r : k_.pairVars) pairs_.push_back(cIdentifier(r, used));
    // 32-bit index arithmetic when every index fits; it is markedly cheaper on the GPU.
    int64_t largest = k_.grid[0] * k_.block[0];
    for (auto& prm : k_.params) largest = std::max(largest, prm.elements);
    indexType_ = largest < (int64_t{1} << 31) ? "int" : "long long";

    std::string out = fmt::format("// kiln: kernel {} of model {} (generated)\n", k_.name, p_.modelName);
    for (auto& o : k_.origins) out += fmt::format("//   holds {}\n", o);
    for (size_t i = 0; i < k_.params.size(); ++i)
      out += fmt::format("//   {} = {} {}[{}]\n", params_[i], p_.buffers[k_.params[i].buffer].name,
                         dtypeName(k_.params[i].dtype), shapeString(p_.buffers[k_.params[i].buffer].shape));
    out += "#include \"kiln_ops.cuh\"\n\n";
    std::vector<std::string> args;
    for (size_t i = 0; i < k_.params.size(); ++i) {
      const auto& prm = k_.params[i];
      args.push_back(fmt::format("{}{}* __restrict__ {}", prm.written ? "" : "const ", cudaTypeName(prm.dtype), params_[i]));
    }
    for (size_t i = 0; i < k_.tensorMaps.size(); ++i) {  // by value in the parameter space, after the pointers
      tensorMaps_.push_back(cIdentifier(fmt::format("tmap{}", i), used));
      args.push_back(fmt::format("const __grid_constant__ CUtensorMap {}", tensorMaps_.back()));
    }
    const std::string cluster = k_.cluster > 1 ? fmt::format("__cluster_dims__({}, 1, 1) ", k_.cluster) : "";
    out += fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}{}({}) {{\n", k_.block[0] * k_.block[1] * k_.block[2] * k_.groups,
                       cluster, k_.name, fmt::join(args, ", "));
    if (k_.groups > 1) {  // Kernel::groups: the body's block and thread indices, and the group's share of shared memory
      out += fmt::format("  const int kiln_group = threadIdx.x / {};  // {} of the kernel's blocks in this thread block\n", k_.block[0], k_.groups);
      out += fmt::format("  [[maybe_unused]] const int kiln_thread = threadIdx.x % {};  // (a body may read neither)\n", k_.block[0]);
      out += fmt::format("  [[maybe_unused]] const int kiln_block = blockIdx.x * {} + kiln_group;\n", k_.groups);
    }
    std::set<int> asyncTargets, tmaTargets;
    collectAsyncTargets(k_.body, asyncTargets, tmaTargets);
    std::string dynamicBase;  // the extern __shared__ array the dynamic buffers are carved from
    for (size_t i = 0; i < k_.shared.size(); ++i) {
      const kernel::SharedBuffer& sb = k_.shared[i];
      if (sb.mbarriers && !sb.dynamic) {
        out += fmt::format("  __shared__ __align__(8) unsigned long long {}[{}];  // mbarriers\n", shared_[i], sb.elements);
        continue;
      }
      if (!sb.dynamic) {
        // 16-byte copies land there, or vector loads read it
        const bool aligned = sb.dtype != DType::F32 || asyncTargets.count(static_cast<int>(i));
        const std::string align = tmaTargets.count(static_cast<int>(i)) ? fmt::format("__align__({}) ", Target::kTmaSharedAlignment)
                                  : aligned                              ? "__align__(16) "
                                                                         : "";
        out += fmt::format("  __shared__ {}{} {}[{}];\n", align, cudaTypeName(sb.dtype), shared_[i], sb.elements);
        continue;
      }
      if (dynamicBase.empty()) {
        dynamicBase = cIdentifier("kiln_dynamic_shared", used);
        out += fmt::format("  extern __shared__ __align__({}) unsigned char {}[];\n", Target::kTmaSharedAlignment, dynamicBase);
      }
      const std::string base = k_.groups > 1 ? fmt::format("{} + kiln_group * {}", dynamicBase, k_.groupSharedBytes()) : dynamicBase;
      out += fmt::format("  {0}* const {1} = reinterpret_cast<{0}*>({2} + {3});  // {4} {5}\n",
                         sb.mbarriers ? "unsigned long long" : cudaTypeName(sb.dtype), shared_[i], base,
                         k_.dynamicSharedOffset(static_cast<int>(i)), sb.elements, sb.mbarriers ? "mbarriers" : "elements");
    }
    if (!floats_.empty()) out += fmt::format("  float {};\n", fmt::join(floats_, ", "));
    if (!pairs_.empty()) out += fmt::format("  unsigned {};  // pairs of 16-bit operand elements\n", fmt::join(pairs_, ", "));
    if (k_.programmaticLaunch)  // before any memory access (Kernel::programmaticLaunch)
      out += "  kiln::wait_prior_grids();  // the kernels launched before this one have completed\n";
    block(k_.body, 1, out);
    if (k_.programmaticLaunch)  // once the block's work is done (Kernel::programmaticLaunch says why not earlier)
      out += "  kiln::launch_dependent_grids();  // the next kernel may launch once every block is here\n";
    out += "}\n";
    return out;
  }

 private:
  // Shared buffers cp.async copies into or vector loads read (16-byte aligned), and those TMA copies into (1024).
  static void collectAsyncTargets(const kernel::Block& b, std::set<int>& out, std::set<int>& tma) {
    for (const kernel::Stmt& s : b) {
      if (s.kind == kernel::Stmt::Kind::CpAsync) out.insert(s.as<kernel::op::CpAsync>().shared);
      if (s.kind == kernel::Stmt::Kind::LoadSharedVector) out.insert(s.as<kernel::op::LoadSharedVector>().shared);
      if (s.kind == kernel::Stmt::Kind::TmaLoad) tma.insert(s.as<kernel::op::TmaLoad>().shared);
      collectAsyncTargets(s.body, out, tma);
    }
  }

  // Index variables print with their C names (threadIdx.x, blockIdx.x, p0, r0, i, j).
  std::string idx(const Idx& e) {
    Idx named = mapIndexLoads(e, [&](const IndexNode& l, const Idx& flat) { return idxLoad(l.buffer, params_[l.buffer], flat); });
    if (k_.groups > 1)  // the body's indices within its group (Kernel::groups)
      named = substitute(named, [](int v, const std::string&) -> Idx {
        return v == kernel::kThreadIdx ? idxVar(v, "kiln_thread") : v == kernel::kBlockIdx ? idxVar(v, "kiln_block") : nullptr;
      });
    return toString(named, true);
  }

  std::string fe(const kernel::FE& e) {
    using K = kernel::FExpr::Kind;
    switch (e->kind) {
      case K::Const: return floatLiteral(e->value);
      case K::Var: return floats_[e->var];
      case K::LoadGlobal: return fmt::format("kiln::to_f32({}[{}])", params_[e->param], idx(e->index));
      case K::LoadShared:
        if (k_.shared[e->shared].dtype == DType::F32) return fmt::format("{}[{}]", shared_[e->shared], idx(e->index));
        return fmt::format("kiln::to_f32({}[{}])", shared_[e->shared], idx(e->index));
      case K::Select: return fmt::format("({} < {} ? {} : {})", idx(e->index), idx(e->bound), fe(e->args[0]), fe(e->args[1]));
      case K::Apply: {
        if (e->fn == tensor::Fn::Cast) return fmt::format("kiln::round_to<{}>({})", cudaTypeName(e->castTo), fe(e->args[0]));
        std::vector<std::string> a;
        for (auto& x : e->args) a.push_back(fe(x));
        return fmt::format("kiln::{}({})", tensor::fnName(e->fn), fmt::join(a, ", "));
      }
    }
    return "?";
  }

  void block(const kernel::Block& b, int depth, std::string& out) {
    const std::string pad(2 * depth, ' ');
    for (const kernel::Stmt& s : b)  // one family each
      if (!control(s, depth, pad, out) && !memory(s, pad, out) && !synchronization(s, pad, out) && !asyncCopy(s, pad, out))
        tensorCore(s, pad, out);
  }

  // Index definitions, float assignments, loops and conditions (the only ones with a body).
  // False where `s` is of another family.
  bool control(const kernel::Stmt& s, int depth, const std::string& pad, std::string& out) {
    using K = kernel::Stmt::Kind;
    switch (s.kind) {
      case K::DefIdx: {
        const auto& def = s.as<kernel::op::DefIdx>();
        out += def.warpUniform
                   ? fmt::format("{}const {} {} = __shfl_sync(0xffffffffu, {}, 0);  // warp-uniform\n", pad, indexType_, def.name, idx(def.value))
                   : fmt::format("{}const {} {} = {};\n", pad, indexType_, def.name, idx(def.value));
        return true;
      }
      case K::Assign: out += fmt::format("{}{} = {};\n", pad, floats_[s.as<kernel::op::Assign>().slot], fe(s.as<kernel::op::Assign>().value)); return true;
      case K::For: {
        const auto& loop = s.as<kernel::op::For>();
        out += fmt::format("{}for ({} {} = {}; {} < {}; {} += {}) {{\n", pad, indexType_, loop.name, idx(loop.begin), loop.name, idx(loop.end),
                           loop.name, loop.step);
        block(s.body, depth + 1, out);
        out += pad + "}\n";
        return true;
      }
      case K::If:
        out += fmt::format("{}if ({} < {}) {{\n", pad, idx(s.as<kernel::op::If>().lhs), idx(s.as<kernel::op::If>().rhs));
        block(s.body, depth + 1, out);
        out += pad + "}\n";
        return true;
      default: return false;
    }
    return true;
  }

  // Global and shared loads and stores.
  // False where `s` is of another family.
  bool memory(const kernel::Stmt& s, const std::string& pad, std::string& out) {
    using K = kernel::Stmt::Kind;
    switch (s.kind) {
      case K::StoreGlobal: {
        const auto& store = s.as<kernel::op::StoreGlobal>();
        out += fmt::format("{}{}[{}] = kiln::from_f32<{}>({});\n", pad, params_[store.param], idx(store.index),
                           cudaTypeName(k_.params[store.param].dtype), fe(store.value));
        return true;
      }
      case K::StoreShared: {
        const auto& store = s.as<kernel::op::StoreShared>();
        const DType dtype = k_.shared[store.shared].dtype;
        if (dtype == DType::F32)
          out += fmt::format("{}{}[{}] = {};\n", pad, shared_[store.shared], idx(store.index), fe(store.value));
        else
          out += fmt::format("{}{}[{}] = kiln::from_f32<{}>({});\n", pad, shared_[store.shared], idx(store.index), cudaTypeName(dtype),
                             fe(store.value));
        return true;
      }
      case K::LoadVector: {
        const auto& load = s.as<kernel::op::LoadVector>();
        out += fmt::format("{}kiln::load_vec<{}>({} + ({}), {});\n", pad, load.slots.size(), params_[load.param], idx(load.index),
                           slotList(load.slots));
        return true;
      }
      case K::LoadSharedVector: {
        const auto& load = s.as<kernel::op::LoadSharedVector>();
        out += fmt::format("{}kiln::load_shared_vec<{}>(&{}[{}], {});\n", pad, load.slots.size(), shared_[load.shared], idx(load.index),
                           slotList(load.slots));
        return true;
      }
      case K::StoreVector: {
        const auto& store = s.as<kernel::op::StoreVector>();
        std::vector<std::string> values;
        for (auto& v : store.values) values.push_back(fe(v));
        out += fmt::format("{}kiln::store_vec<{}>({} + ({}), {});\n", pad, store.values.size(), params_[store.param], idx(store.index),
                           fmt::join(values, ", "));
        return true;
      }
      default: return false;
    }
    return true;
  }

  // Barriers, and the tickets and counters blocks hand work over by.
  // False where `s` is of another family.
  bool synchronization(const kernel::Stmt& s, const std::string& pad, std::string& out) {
    using K = kernel::Stmt::Kind;
    switch (s.kind) {
      case K::Barrier:  // a group's own barrier where the thread block holds several (Kernel::groups)
        out += k_.groups > 1 ? fmt::format("{}kiln::group_barrier<{}>(1 + kiln_group);\n", pad, k_.block[0]) : pad + "__syncthreads();\n";
        return true;
      case K::BlockTicket: {  // kernel::blockTicket: the block's stores, then one acq_rel atomic by thread 0, shared
        // bar.sync orders every thread's stores before thread 0's release (cumulative at gpu scope), and its acquire
        // before every thread's loads after the second bar.sync: no fence per thread (a fence.sc per thread measured
        // 1 to 5 us slower on the H200).
        const auto& ticket = s.as<kernel::op::BlockTicket>();
        const std::string held = ticket.name + "_held", counter = counterAt(ticket.counter);
        out += fmt::format("{}__shared__ unsigned long long {};\n", pad, held);
        out += pad + "__syncthreads();\n";
        out += fmt::format("{}if (threadIdx.x == 0) {{\n", pad);
        out += fmt::format("{}  {} = kiln::ticket(reinterpret_cast<unsigned long long*>(&{}), {}ull);\n", pad, held, counter,
                           ticket.blocks);
        out += pad + "}\n";
        out += pad + "__syncthreads();\n";
        out += fmt::format("{}const {} {} = static_cast<{}>({});\n", pad, indexType_, ticket.name, indexType_, held);
        return true;
      }
      case K::CounterRelease:
        out += fmt::format("{}kiln::counter_release(reinterpret_cast<unsigned long long*>(&{}));\n", pad,
                           counterAt(s.as<kernel::op::CounterRelease>().counter));
        return true;
      case K::CounterAwait:
        out += fmt::format("{}kiln::counter_await(reinterpret_cast<unsigned long long*>(&{}), static_cast<unsigned long long>({}));\n",
                           pad, counterAt(s.as<kernel::op::CounterAwait>().counter), idx(s.as<kernel::op::CounterAwait>().count));
        return true;
      case K::NamedBarrier: {
        const auto& bar = s.as<kernel::op::NamedBarrier>();
        out += fmt::format("{}kiln::named_barrier<{}, {}>();\n", pad, bar.id, bar.threads);
        return true;
      }
      case K::ClusterBarrier: out += pad + "kiln::cluster_barrier();\n"; return true;
      default: return false;
    }
    return true;
  }

  // The names of float slots, comma-separated.
  std::string slotList(const std::vector<int>& slots) {
    std::vector<std::string> names;
    for (int slot : slots) names.push_back(floats_[slot]);
    return fmt::format("{}", fmt::join(names, ", "));
  }

  // `param[index]` of a counter.
  std::string counterAt(const kernel::op::Counter& c) { return fmt::format("{}[{}]", params_[c.param], idx(c.index)); }

  // `&buffer[index]` of the mbarrier a statement of the mbarrier family names.
  std::string barrier(const kernel::Stmt& s) {
    const kernel::op::Mbarrier& b = *kernel::op::mbarrierOf(s.op);
    return fmt::format("&{}[{}]", shared_[b.buffer], idx(b.index));
  }

  // cp.async, TMA and the mbarriers they complete.
  // False where `s` is of another family.
  bool asyncCopy(const kernel::Stmt& s, const std::string& pad, std::string& out) {
    using K = kernel::Stmt::Kind;
    switch (s.kind) {
      case K::CpAsync: {
        const auto& copy = s.as<kernel::op::CpAsync>();
        out += fmt::format("{}kiln::cp_async<{}>(&{}[{}], &{}[{}]{});\n", pad, copy.bytes, shared_[copy.shared], idx(copy.sharedIndex),
                           params_[copy.param], idx(copy.globalIndex), copy.validBytes ? ", " + idx(copy.validBytes) : std::string());
        return true;
      }
      case K::CpAsyncCommit: out += pad + "kiln::cp_async_commit();\n"; return true;
      case K::CpAsyncWait: out += fmt::format("{}kiln::cp_async_wait<{}>();\n", pad, s.as<kernel::op::CpAsyncWait>().pendingGroups); return true;
      case K::FenceProxyAsync: out += pad + "kiln::fence_proxy_async_shared();\n"; return true;
      case K::FenceMbarrierInit: out += pad + "kiln::fence_mbarrier_init();\n"; return true;
      case K::MbarrierInit: out += fmt::format("{}kiln::mbarrier_init({}, {});\n", pad, barrier(s), s.as<kernel::op::MbarrierInit>().arrivals); return true;
      case K::MbarrierArriveCluster: out += fmt::format("{}kiln::mbarrier_arrive_cluster<{}>({});\n", pad, k_.cluster, barrier(s)); return true;
      case K::MbarrierArrive: out += fmt::format("{}kiln::mbarrier_arrive({});\n", pad, barrier(s)); return true;
      case K::CpAsyncMbarrierArrive: out += fmt::format("{}kiln::cp_async_mbarrier_arrive({});\n", pad, barrier(s)); return true;
      case K::MbarrierExpectTx: {
        const auto& expect = s.as<kernel::op::MbarrierExpectTx>();
        out += fmt::format("{}kiln::mbarrier_arrive_expect_tx{}({}, {});\n", pad, expect.elected ? "_elected" : "", barrier(s), expect.bytes);
        return true;
      }
      case K::TmaLoad: {
        const auto& tma = s.as<kernel::op::TmaLoad>();
        out += fmt::format("{}kiln::tma_load_2d{}(&{}[{}], &{}, {}, {}, {}{});\n", pad, tma.elected ? "<true>" : "", shared_[tma.shared],
                           idx(tma.sharedIndex), tensorMaps_[static_cast<size_t>(tma.tensorMap)], idx(tma.col), idx(tma.row), barrier(s),
                           tma.multicast ? fmt::format(", {}", (1 << k_.cluster) - 1) : "");
        return true;
      }
      case K::MbarrierWait: out += fmt::format("{}kiln::mbarrier_wait({}, {});\n", pad, barrier(s), idx(s.as<kernel::op::MbarrierWait>().parity)); return true;
      default: return false;
    }
    return true;
  }

  // ldmatrix, mma, wgmma and the register moves around them.
  // False where `s` is of another family.
  bool tensorCore(const kernel::Stmt& s, const std::string& pad, std::string& out) {
    using K = kernel::Stmt::Kind;
    switch (s.kind) {
      case K::Ldmatrix: {
        const auto& ld = s.as<kernel::op::Ldmatrix>();
        if (const auto* regs = std::get_if<kernel::op::PairRegs>(&ld.into)) {
          std::vector<std::string> names;
          for (int r : regs->regs) names.push_back(pairs_[r]);
          out += fmt::format("{}kiln::ldmatrix_pairs<{}>(&{}[{}], {});\n", pad, ld.transpose ? "true" : "false", shared_[ld.shared],
                             idx(ld.rowIndex), fmt::join(names, ", "));
          return true;
        }
        out += fmt::format("{}kiln::ldmatrix<{}, {}>(&{}[{}], {});\n", pad, ld.matrices(), ld.transpose ? "true" : "false",
                           shared_[ld.shared], idx(ld.rowIndex), slotList(std::get<kernel::op::FloatSlots>(ld.into).slots));
        return true;
      }
      case K::Wgmma: out += wgmma(s, pad); return true;
      case K::WgmmaFence: out += pad + "kiln::wgmma_fence();\n"; return true;
      case K::WgmmaCommit: out += pad + "kiln::wgmma_commit_group();\n"; return true;
      case K::WgmmaWait: out += fmt::format("{}kiln::wgmma_wait_group<{}>();\n", pad, s.as<kernel::op::WgmmaWait>().pendingGroups); return true;
      case K::PackPair: {
        const auto& pack = s.as<kernel::op::PackPair>();
        out += fmt::format("{}{} = kiln::pack2({}(), {}, {});\n", pad, pairs_[pack.reg], cudaTypeName(pack.type), floats_[pack.lo],
                           floats_[pack.hi]);
        return true;
      }
      case K::ShuffleXor: {
        const auto& shfl = s.as<kernel::op::ShuffleXor>();
        out += fmt::format("{}{} = __shfl_xor_sync(0xffffffffu, {}, {});\n", pad, floats_[shfl.dst], floats_[shfl.src], shfl.laneMask);
        return true;
      }
      case K::Mma: out += mma(s.as<kernel::op::Mma>(), pad); return true;
      default: return false;
    }
    return true;
  }

  // One mma.m16n8k16: kiln::mma_m16n8k16 on float slots (c, then a and b), kiln::mma_m16n8k16_pairs on 32-bit pairs
  // (pair registers, or pairs read straight from shared memory).
  std::string mma(const kernel::op::Mma& mma, const std::string& pad) {
    std::vector<std::string> c, ab;
    for (int slot : mma.c) c.push_back(floats_[slot]);
    const char* pairsSuffix = "_pairs";
    if (const auto* regs = std::get_if<kernel::op::MmaFromPairs>(&mma.operands)) {  // A and B in pair registers
      for (int r : regs->a) ab.push_back(pairs_[r]);
      for (int r : regs->b) ab.push_back(pairs_[r]);
    } else if (const auto* shared = std::get_if<kernel::op::MmaFromShared>(&mma.operands)) {  // 32-bit pairs from shared memory
      for (const Idx& at : shared->aPairs) ab.push_back(fmt::format("kiln::pair(&{}[{}])", shared_[shared->bufferA], idx(at)));
      for (const Idx& at : shared->bPairs) ab.push_back(fmt::format("kiln::pair(&{}[{}])", shared_[shared->bufferB], idx(at)));
    } else {
      const auto& slots = std::get<kernel::op::MmaFromSlots>(mma.operands);
      for (int slot : slots.a) ab.push_back(floats_[slot]);
      for (int slot : slots.b) ab.push_back(floats_[slot]);
      pairsSuffix = "";
    }
    return fmt::format("{}kiln::mma_m16n8k16{}<{}>({}, {});\n", pad, pairsSuffix, cudaTypeName(mma.operandType), fmt::join(c, ", "),
                       fmt::join(ab, ", "));
  }

  // One wgmma.mma_async as inline PTX: its n / 2 accumulators are "+f" operands (too many for a fixed helper), the
  // operands two shared-memory descriptors (kiln::wgmma_desc, no swizzle), scale-d = 1 (D += A·B) or op::Wgmma::scaleD.
  std::string wgmma(const kernel::Stmt& s, const std::string& pad) {
    const auto& wg = s.as<kernel::op::Wgmma>();
    const size_t n = wg.acc.size();
    std::vector<std::string> regs, outs;
    for (size_t i = 0; i < n; ++i) {
      regs.push_back(fmt::format("%{}", i));
      outs.push_back(fmt::format("\"+f\"({})", floats_[wg.acc[i]]));
    }
    const char* type = wg.operandType == DType::BF16 ? "bf16" : "f16";
    auto desc = [&](const kernel::op::SharedMatrix& m) {
      const int buffer = m.buffer;
      const Idx& at = m.start;
      const kernel::op::CoreMatrices& l = m.layout;
      const kernel::WgmmaDescriptor d = kernel::wgmmaDescriptor(l, dtypeBytes(k_.shared[buffer].dtype));
      if (!d.swizzle128)
        return fmt::format("\"l\"(kiln::wgmma_desc(&{}[{}], {}, {}))", shared_[buffer], idx(at), *d.leadingBytes, d.strideBytes);
      if (d.leadingBytes)
        return fmt::format("\"l\"(kiln::wgmma_desc_swizzle128(&{}[{}], {}, {}))", shared_[buffer], idx(at), d.strideBytes,
                           *d.leadingBytes);
      return fmt::format("\"l\"(kiln::wgmma_desc_swizzle128(&{}[{}], {}))", shared_[buffer], idx(at), d.strideBytes);
    };
    // A: a descriptor of shared memory, then the immediates scale-a, scale-b, trans-a, trans-b; or (wgmmaRegA) the 4 pair
    // registers, and no trans-a immediate. Operands: the accumulators, the scale-d flag, A's inputs, B's descriptor.
    std::vector<std::string> a, in;
    const auto* sharedA = std::get_if<kernel::op::SharedMatrix>(&wg.a);
    if (!sharedA)
      for (size_t i = 0; i < 4; ++i) {
        a.push_back(fmt::format("%{}", n + 1 + i));
        in.push_back(fmt::format("\"r\"({})", pairs_[std::get<kernel::op::PairRegs>(wg.a).regs[i]]));
      }
    else {
      a.push_back(fmt::format("%{}", n + 1));
      in.push_back(desc(*sharedA));
    }
    const std::string aOperand = !sharedA ? fmt::format("{{{}}}", fmt::join(a, ", ")) : a[0];
    const std::string immediates = std::string(!sharedA ? "1, 1, " : "1, 1, 0, ") + (wg.b.layout.mnMajor ? "1" : "0");
    return fmt::format("{0}asm volatile(\"{{\\n.reg .pred d;\\nsetp.ne.b32 d, %{1}, 0;\\n\"\n"
                       "{0}             \"wgmma.mma_async.sync.aligned.m64n{2}k16.f32.{3}.{3} {{{4}}}, {5}, %{6}, d, {7};\\n}}\\n\"\n"
                       "{0}             : {8}\n{0}             : \"r\"({11}), {9}, {10});\n",
                       pad, n, wg.n, type, fmt::join(regs, ", "), aOperand, n + 1 + in.size(), immediates, fmt::join(outs, ", "),
                       fmt::join(in, ", "), desc(wg.b), wg.scaleD ? idx(wg.scaleD) : std::string("1"));
  }

  const kernel::Program& p_;
  const kernel::Kernel& k_;
  std::vector<std::string> params_, shared_, floats_, pairs_, tensorMaps_;
  std::string indexType_;
};

}  // namespace

Module emit(const kernel::Program& p) {
  Module m{p.modelName, {}};
  for (const kernel::Kernel& k : p.kernels) m.sources.push_back(Source{k.name, k.name + ".cu", Emitter(p, k).run()});
  return m;
}

std::string print(const Module& m) {
  std::string out = fmt::format("// kiln cuda: {}\n", m.modelName);
  for (auto& s : m.sources) out += fmt::format("\n// ----- {} -----\n{}", s.file, s.text);
  return out;
}

nlohmann::json toJson(const Module& m) {
  nlohmann::json j{{"level", "cuda"}, {"model", m.modelName}};
  j["sources"] = nlohmann::json::array();
  for (auto& s : m.sources) j["sources"].push_back({{"kernel", s.kernel}, {"file", s.file}, {"text", s.text}});
  return j;
}

void verify(const Module& m) {
  std::set<std::string> files;
  for (auto& s : m.sources) KILN_ASSERT(files.insert(s.file).second, "two kernels emit {}", s.file);
}

}  // namespace kiln::cuda
