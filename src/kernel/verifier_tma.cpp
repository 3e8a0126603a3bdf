// TMA rules for the Kernel IR verifier (verifier_tma.h).
#include "verifier_tma.h"

#include <fmt/format.h>

#include "kiln/support/shared_layout.h"

namespace kiln::kernel::detail {

std::string checkTensorMap(const Kernel& k, const Target& target, size_t i) {
  const TensorMap& m = k.tensorMaps[i];
  const std::string what = fmt::format("tensor map {}", i);
  if (!target.tma) return fmt::format("{} on {}, which has no TMA (sm_90 and later)", what, target.arch);
  if (m.param < 0 || m.param >= static_cast<int>(k.params.size()))
    return fmt::format("{} views parameter #{} of {}", what, m.param, k.params.size());
  const Param& prm = k.params[static_cast<size_t>(m.param)];
  if (prm.dtype != DType::BF16 && prm.dtype != DType::F16 && prm.dtype != DType::F32)
    return fmt::format("{} over {} {} (TMA copies bf16, f16 or f32 here)", what, dtypeName(prm.dtype), prm.name);
  const int64_t bytes = dtypeBytes(prm.dtype);
  if (m.rows < 1 || m.cols < 1 || m.rowStride < m.cols || m.offset < 0)
    return fmt::format("{}: {} rows x {} cols, row stride {}, offset {}", what, m.rows, m.cols, m.rowStride, m.offset);
  if (m.offset + (m.rows - 1) * m.rowStride + m.cols > prm.elements)
    return fmt::format("{} reaches element {} of {}, which has {}", what, m.offset + (m.rows - 1) * m.rowStride + m.cols - 1, prm.name,
                       prm.elements);
  if (m.offset * bytes % 16 != 0 || m.rowStride * bytes % 16 != 0)
    return fmt::format("{}: offset {} and row stride {} elements must be multiples of 16 bytes", what, m.offset, m.rowStride);
  if (m.boxRows < 1 || m.boxRows > 256 || m.boxCols < 1 || m.boxCols > 256 || m.boxCols * bytes % 16 != 0)
    return fmt::format("{}: boxes of {} x {} (1..256 a side, rows of a multiple of 16 bytes)", what, m.boxRows, m.boxCols);
  if (m.swizzle128 && m.boxCols * bytes != kSwizzle128RowBytes)
    return fmt::format("{}: the 128-byte swizzle needs box rows of 128 bytes, not {}", what, m.boxCols * bytes);
  if (m.multicastParts != 0 && (m.multicastParts != k.cluster || m.multicastParts < 2 || m.boxRows % m.multicastParts != 0))
    return fmt::format("{}: multicast in {} parts needs a cluster of that many blocks (this kernel's: {}) and boxes whose {} rows "
                       "they divide",
                       what, m.multicastParts, k.cluster, m.boxRows);
  return "";
}

int64_t boxElements(const Kernel& k, const op::TmaLoad& s) {
  const TensorMap& m = k.tensorMaps[static_cast<size_t>(s.tensorMap)];
  return m.boxRows * m.boxCols;
}

int64_t tmaDestinationAlignment(const Kernel& k, const op::TmaLoad& s) {
  const TensorMap& m = k.tensorMaps[static_cast<size_t>(s.tensorMap)];
  return (m.swizzle128 ? kSwizzle128AtomBytes : 128) / dtypeBytes(k.params[static_cast<size_t>(m.param)].dtype);
}

std::string checkTmaLoad(const Kernel& k, const op::TmaLoad& s) {
  if (s.tensorMap < 0 || s.tensorMap >= static_cast<int>(k.tensorMaps.size()))
    return fmt::format("tma.load from tensor map #{} of {}", s.tensorMap, k.tensorMaps.size());
  if (!s.col || !s.row) return "tma.load without a column and a row";
  if (s.shared < 0 || s.shared >= static_cast<int>(k.shared.size()) || k.shared[s.shared].mbarriers)
    return fmt::format("tma.load into shared buffer #{}, which is not a buffer of elements", s.shared);
  const int barriers = s.barrier.buffer;
  if (barriers < 0 || barriers >= static_cast<int>(k.shared.size()) || !k.shared[barriers].mbarriers)
    return fmt::format("tma.load completing on shared buffer #{}, which holds no mbarriers", barriers);
  const DType type = k.params[static_cast<size_t>(k.tensorMaps[static_cast<size_t>(s.tensorMap)].param)].dtype;
  const SharedBuffer& dst = k.shared[s.shared];
  if (dst.dtype != type) return fmt::format("tma.load of {} into shared {} of {}", dtypeName(type), dst.name, dtypeName(dst.dtype));
  if (dst.dynamic && k.dynamicSharedOffset(s.shared) % 1024 != 0)
    return fmt::format("tma.load into shared {} at dynamic byte {} (TMA destinations are 1024-byte aligned here)", dst.name,
                       k.dynamicSharedOffset(s.shared));
  return "";
}

namespace {
bool usesClusters(const Block& body, bool peers) {  // peers: only statements that reach other blocks
  for (const Stmt& st : body)
    if ((st.kind == Stmt::Kind::TmaLoad && st.as<op::TmaLoad>().multicast) || st.kind == Stmt::Kind::MbarrierArriveCluster ||
        (!peers && (st.kind == Stmt::Kind::ClusterBarrier || st.kind == Stmt::Kind::FenceMbarrierInit)) || usesClusters(st.body, peers))
      return true;
  return false;
}

bool usesGroupWideState(const Block& body) {  // what a group of a packed thread block cannot have to itself
  for (const Stmt& st : body)
    if (st.kind == Stmt::Kind::NamedBarrier || st.kind == Stmt::Kind::BlockTicket || usesGroupWideState(st.body)) return true;
  return false;
}
}  // namespace

std::string checkLaunch(const Kernel& k, const Target& target) {
  if (k.groups < 1 || k.groups > 8) return fmt::format("{} groups a thread block (1 to 8)", k.groups);
  if (k.groups > 1) {
    if (k.grid[0] % k.groups != 0 || k.grid[1] != 1 || k.grid[2] != 1 || k.block[1] != 1 || k.block[2] != 1)
      return fmt::format("{} groups a thread block in a grid of ({}, {}, {}) blocks of ({}, {}, {}) threads (groups divide a "
                         "one-dimensional grid)", k.groups, k.grid[0], k.grid[1], k.grid[2], k.block[0], k.block[1], k.block[2]);
    if (k.block[0] % Target::kWarpSize != 0 || k.block[0] * k.groups > target.maxThreadsPerBlock)
      return fmt::format("{} groups of {} threads a thread block (whole warps, at most {} threads)", k.groups, k.block[0],
                         target.maxThreadsPerBlock);
    if (k.cluster > 1 || k.sharedBytes() > 0 || usesGroupWideState(k.body))
      return "groups in a kernel with a cluster, static shared buffers, named barriers or block tickets (each would be the "
             "thread block's, not a group's)";
  }
  if (k.cluster < 1 || k.cluster > 8) return fmt::format("a cluster of {} blocks (1 to 8)", k.cluster);
  if (k.cluster > 1 && (k.grid[0] % k.cluster != 0 || k.grid[1] != 1 || k.grid[2] != 1))
    return fmt::format("a cluster of {} blocks in a grid of ({}, {}, {}) (clusters divide a one-dimensional grid)", k.cluster, k.grid[0],
                       k.grid[1], k.grid[2]);
  if (k.cluster < 2 && usesClusters(k.body, true))
    return "a multicast tma.load or an mbarrier.arrive on every block of the cluster in a kernel without a thread-block cluster";
  if ((k.cluster > 1 || usesClusters(k.body, false)) && !target.tma)
    return fmt::format("thread-block clusters on {}, which has none (sm_90 and later)", target.arch);
  if (k.programmaticLaunch && !target.programmaticLaunch)
    return fmt::format("a programmatic launch (griddepcontrol) on {}, which has none (sm_90 and later)", target.arch);
  return "";
}

}  // namespace kiln::kernel::detail
