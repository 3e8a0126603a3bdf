// kernel-multicast-operands (kiln/kernel/lower.h): in a kernel of thread-block clusters of C blocks whose tensor map is
// marked `multicast in C parts` (a product's operand that the cluster's blocks all read, TiledContraction::cluster and
// multicastB; tile-multicast-operands says why), each block stops copying whole boxes of it for itself: block r of a
// cluster copies rows [r, r + 1) * R / C of every box (R rows) into the same place in all C blocks (tma.load.multicast),
// so the cluster reads each box from L2 once instead of C times. What that needs, all carried out here:
//  - the map's boxes are R / C rows high; each copy through it lands at its element plus r * (R / C) * box columns and
//    reads from its row plus r * (R / C), r = blockIdx mod C (clusters are consecutive blocks);
//  - a block may only be copied into once every block of the cluster is done with the slot: the releases
//    (mbarrier.arrive) become arrivals on that barrier in every block of the cluster (mbarrier.arrive.cluster), and
//    each such barrier counts C times the arrivals;
//  - the cluster's blocks must not copy into one another before their barriers are initialised: the initialisation is
//    fenced for the cluster (fence.mbarrier_init) and the block barrier after it becomes a cluster barrier;
//  - no block may leave while copies into it may still be on their way: a cluster barrier after the work that copies
//    (and the wgmma waits right behind it).
// Every block still arms its own full barrier with the whole box's bytes, which the C parts complete. The interpreter
// checks that the cluster's blocks issue the same copies and arrivals (tests/unit/kernel_cluster_test.cpp).
#include <algorithm>
#include <optional>
#include <set>
#include <utility>

#include "bodies.h"
#include "kiln/kernel/lower.h"

namespace kiln::kernel {
namespace {

struct Cluster {
  const Kernel* kernel;
  int64_t C;
  std::set<int> maps;      // the marked tensor maps
  std::set<int> released;  // the mbarrier buffers whose arrivals now reach the cluster
};

// Every multicast copy's part, and every release as a cluster arrival, in b.
void rewriteCopies(const Cluster& c, Block& b) {
  for (Stmt& s : b) {
    if (auto* tma = std::get_if<op::TmaLoad>(&s.op); tma && c.maps.count(tma->tensorMap) && !tma->multicast) {
      const TensorMap& m = c.kernel->tensorMaps[static_cast<size_t>(tma->tensorMap)];
      const VarExtents extents = extentsAt(*c.kernel, s);
      const Idx rank = mod(blockIdx(), c.C);  // the block's place in its cluster
      tma->sharedIndex = simplify(tma->sharedIndex + rank * idxConst(m.boxRows * m.boxCols), extents);
      tma->row = simplify(tma->row + rank * idxConst(m.boxRows), extents);
      tma->multicast = true;
    } else if (const auto* arrive = std::get_if<op::MbarrierArrive>(&s.op); arrive && c.released.count(arrive->barrier.buffer)) {
      s = mbarrierArriveCluster(arrive->barrier.buffer, arrive->barrier.index);
    }
    rewriteCopies(c, s.body);
  }
}

// Whether s, or a statement in its body, copies through one of `maps`.
bool copiesThrough(const Stmt& s, const std::set<int>& maps) {
  if (const auto* tma = std::get_if<op::TmaLoad>(&s.op); tma && maps.count(tma->tensorMap)) return true;
  for (const Stmt& c : s.body)
    if (copiesThrough(c, maps)) return true;
  return false;
}

// The mbarrier buffers that threads release with mbarrier.arrive (a ring's empty barriers).
void releasedBarriers(const Block& b, std::set<int>& out) {
  for (const Stmt& s : b) {
    if (const auto* arrive = std::get_if<op::MbarrierArrive>(&s.op)) out.insert(arrive->barrier.buffer);
    releasedBarriers(s.body, out);
  }
}

// Where the barriers are initialised (the first top-level statement whose body holds mbarrier inits) and the block
// barrier after it; nullopt when the kernel has no such pair.
std::optional<std::pair<size_t, size_t>> initAndBarrier(const Block& body) {
  for (size_t i = 0; i < body.size(); ++i) {
    if (std::none_of(body[i].body.begin(), body[i].body.end(), [](const Stmt& s) { return s.kind == Stmt::Kind::MbarrierInit; }))
      continue;
    for (size_t j = i + 1; j < body.size(); ++j)
      if (body[j].kind == Stmt::Kind::Barrier) return std::make_pair(i, j);
    return std::nullopt;
  }
  return std::nullopt;
}

// The initialisation of the released barriers counts the cluster's arrivals and is fenced for the cluster; the block
// barrier after it becomes the cluster's.
void meetAfterInit(const Cluster& c, Block& body, size_t init, size_t barrier) {
  for (Stmt& s : body[init].body)
    if (auto* i = std::get_if<op::MbarrierInit>(&s.op); i && c.released.count(i->barrier.buffer)) i->arrivals *= c.C;
  body[init].body.push_back(fenceMbarrierInit());
  body[barrier] = clusterBarrier();
}

bool multicast(Kernel& k) {
  Cluster c{&k, k.cluster, {}, {}};
  for (size_t i = 0; i < k.tensorMaps.size(); ++i)
    if (k.tensorMaps[i].multicastParts > 1 && k.tensorMaps[i].multicastParts == k.cluster &&
        k.tensorMaps[i].boxRows % k.cluster == 0)
      c.maps.insert(static_cast<int>(i));
  size_t end = 0;  // after the last top-level statement that copies
  for (size_t i = 0; i < k.body.size(); ++i)
    if (copiesThrough(k.body[i], c.maps)) end = i + 1;
  if (end == 0) return false;
  const auto init = initAndBarrier(k.body);
  if (!init) return false;  // not the shape the lowering makes: left as it is, each block copying for itself
  releasedBarriers(k.body, c.released);
  meetAfterInit(c, k.body, init->first, init->second);
  // The cluster meets after the last statement that copies, and the wgmma waits right behind it (meetAfterInit moved no
  // top-level statement, so `end` still counts the same ones).
  while (end < k.body.size() && k.body[end].kind == Stmt::Kind::WgmmaWait) ++end;
  k.body.insert(k.body.begin() + static_cast<std::ptrdiff_t>(end), clusterBarrier());
  for (int m : c.maps) k.tensorMaps[static_cast<size_t>(m)].boxRows /= k.cluster;
  rewriteCopies(c, k.body);
  for (int m : c.maps) k.tensorMaps[static_cast<size_t>(m)].multicastParts = 0;
  return true;
}

}  // namespace

bool multicastOperands(Program& p) {
  bool changed = false;
  for (Kernel& k : p.kernels)
    if (k.cluster > 1) changed |= multicast(k);
  return changed;
}

}  // namespace kiln::kernel
