// kernel-finish-in-last-block: small kernels launched right after a kernel run inside it, in the block that finishes
// last: every block takes a ticket when its own work is done (kernel::blockTicket, which makes the earlier blocks'
// stores visible to the later ones), and the block with the last ticket runs the small kernels' blocks, side by side
// where they are narrower than it and hold no barrier or shuffle, one after another otherwise, a block barrier after
// each round.
//
//   kernel k12 grid(256) block(256): the o_proj product        kernel k13 grid(1) block(256): the next RMSNorm
//   becomes  kernel k12__k13 grid(256) block(256): the product; ticket = ...; if (254 < ticket) { the norm; barrier }
//
// Why: a decoder step is a chain of launches, each costing a grid's drain and the next grid's start (about 2.5-3 µs on
// an H200 even overlapped, kernel-overlap-launches) whatever it does. A decoder layer's norms (one row), rotaries and
// cache writes (one token's row, after kernel-launch-only-changes) are one to eight blocks of work that must wait for
// the product before them; in that product's last block they cost their own work and one atomic per block instead of
// a launch. A prefill's norms (a row per token: 128 blocks) stay kernels of their own: one block doing them all would
// take longer than the launch.
//
// The rule: a host kernel A and the kernels B1..Bn right after it, all copyable (passes/kernel/bodies.h: one-dimensional,
// of the CUDA-core family, no dynamic shared memory, counters, clusters or packed groups); each B of at most
// kMaxTailBlocks blocks; the merged block is the widest of theirs, and a body narrower than it runs under threadIdx.x <
// its width, so it may hold no barrier or shuffle (a host narrower than a tail, widened, must also be of one block);
// the static shared memory of all within the target's. A gets a counter in the program's
// `tail_counters` buffer (kind counters: zero at load, left zero by the last ticket). A parameter per buffer: a B
// reading what A writes reads it through A's own (written) parameter, never a read-only alias of it.
#include <fmt/format.h>

#include <algorithm>

#include "bodies.h"
#include "kiln/kernel/lower.h"

namespace kiln::kernel {
namespace {

constexpr int64_t kMaxTailBlocks = 8;

// The block width host and tails run with together: the widest of theirs.
int64_t widthOf(const Kernel& host, const std::vector<const Kernel*>& tails) {
  int64_t width = host.block[0];
  for (const Kernel* b : tails) width = std::max(width, b->block[0]);
  return width;
}

// Whether `tails` may run in host's last block: each of at most kMaxTailBlocks blocks; a body narrower than the width
// (under threadIdx.x < its own) holds no barrier or shuffle; a host narrower than a tail has one block.
bool fitTogether(const Kernel& host, const std::vector<const Kernel*>& tails) {
  const int64_t width = widthOf(host, tails);
  if (width > host.block[0] && (host.grid[0] != 1 || hasCollectives(host.body))) return false;
  return std::all_of(tails.begin(), tails.end(), [&](const Kernel* b) {
    return b->grid[0] <= kMaxTailBlocks && (b->block[0] == width || !hasCollectives(b->body));
  });
}

// Appends b's parameters to m's (one per buffer: a buffer either writes is written), returning b's numbering in m.
std::vector<int> mergeParams(Kernel& m, const Kernel& b) {
  std::vector<int> at;
  for (const Param& prm : b.params) {
    auto same = std::find_if(m.params.begin(), m.params.end(), [&](const Param& q) { return q.buffer == prm.buffer; });
    if (same == m.params.end()) same = m.params.insert(m.params.end(), prm);
    same->written = same->written || prm.written;
    at.push_back(static_cast<int>(same - m.params.begin()));
  }
  return at;
}

// b's blocks as statements of a block `width` threads wide, reading blockIdx.x through `r` (its parameters, slots and
// variables already numbered): side by side where b is narrower and holds no barrier or shuffle (block
// `round*side + threadIdx.x floordiv b's width` of b run by those threads, threadIdx.x read modulo b's width), one after
// another otherwise; a block barrier after each round.
Block tailBlocks(const Kernel& b, Renumber& r, int64_t width, int& nextVar) {
  const int64_t bw = b.block[0];
  const int64_t side = bw < width && !hasCollectives(b.body) ? width / bw : 1;
  const int64_t rounds = (b.grid[0] + side - 1) / side;
  const int roundVar = nextVar++, blockVar = nextVar++, threadVar = nextVar++;
  const Idx round = rounds == 1 ? idxConst(0) : idxVar(roundVar, "tail_round");
  Block body;
  if (side == 1) {
    r.blockVar = round;
    body = r.statements(b.body);
  } else {  // block and thread as variables, whose ranges the conditions on them bound for the verifier
    const std::string blockName = "tail_block" + r.nameSuffix, threadName = "tail_thread" + r.nameSuffix;
    r.threadVar = idxVar(threadVar, threadName);
    r.blockVar = idxVar(blockVar, blockName);
    body = r.statements(b.body);
    if (side * rounds != b.grid[0]) body = {ifLess(r.blockVar, idxConst(b.grid[0]), std::move(body))};
    body.insert(body.begin(), defIdx(threadVar, threadName, mod(threadIdx(), bw)));
    body.insert(body.begin(), defIdx(blockVar, blockName, idxMul(round, side) + floorDiv(threadIdx(), bw)));
  }
  if (side * bw < width) body = {ifLess(threadIdx(), idxConst(side * bw), std::move(body))};
  body.push_back(barrier());  // its stores seen by the next round and tail; its shared memory free for them
  if (rounds == 1) return body;
  return {forLoop(roundVar, "tail_round", idxConst(0), idxConst(rounds), 1, std::move(body))};
}

// Host kernel `host` with `tails` run by its last block, counting tickets at element `counter` of buffer `counters`
// (of `all` counters); a host of one block takes no ticket.
Kernel withTails(const Kernel& host, const std::vector<const Kernel*>& tails, int counters, int64_t counter, int64_t all) {
  Kernel m = host;
  m.block[0] = widthOf(host, tails);
  if (host.block[0] < m.block[0]) m.body = {ifLess(threadIdx(), idxConst(host.block[0]), std::move(m.body))};
  Block tail;
  int nextVar = maxVar(host.body) + 1;
  for (size_t n = 0; n < tails.size(); ++n) {
    const Kernel& b = *tails[n];
    m.name += "__" + b.name;
    Renumber r;
    r.param = mergeParams(m, b);
    for (const SharedBuffer& sb : b.shared) {
      r.shared.push_back(static_cast<int>(m.shared.size()));
      m.shared.push_back(sb);
    }
    r.slotOffset = static_cast<int>(m.floatVars.size());
    for (const std::string& f : b.floatVars) m.floatVars.push_back(fmt::format("{}_t{}", f, n + 1));
    r.varOffset = nextVar - (kBlockIdx + 1);
    nextVar += maxVar(b.body) - kBlockIdx;
    r.nameSuffix = fmt::format("_t{}", n + 1);
    const Block blocks = tailBlocks(b, r, m.block[0], nextVar);
    tail.insert(tail.end(), blocks.begin(), blocks.end());
    m.origins = loop::mergeOrigins(m.origins, b.origins);
  }
  if (host.grid[0] == 1) {  // one block: it is the last; a barrier shows it its own stores
    m.body.push_back(barrier());
    m.body.insert(m.body.end(), tail.begin(), tail.end());
    return m;
  }
  const int counterParam = static_cast<int>(m.params.size());
  m.params.push_back(Param{counters, "tail_counters", DType::I64, all, true});
  const int ticket = nextVar++;
  const int64_t blocks = host.grid[0];
  m.body.push_back(blockTicket(ticket, "ticket", counterParam, idxConst(counter), blocks));
  m.body.push_back(ifLess(idxConst(blocks - 2), idxVar(ticket, "ticket"), std::move(tail)));
  return m;
}

}  // namespace

bool finishInLastBlock(Program& p) {
  std::vector<Kernel> out;
  std::vector<std::pair<size_t, std::vector<const Kernel*>>> hosts;  // (index in out, its tails)
  for (size_t i = 0; i < p.kernels.size();) {
    const Kernel& host = p.kernels[i];
    std::vector<const Kernel*> tails;
    int64_t shared = host.sharedBytes();
    size_t next = i + 1;
    if (copyable(p, host))
      for (; next < p.kernels.size(); ++next) {
        const Kernel& b = p.kernels[next];
        std::vector<const Kernel*> with = tails;
        with.push_back(&b);
        if (!copyable(p, b) || !fitTogether(host, with) || shared + b.sharedBytes() > p.target.staticSharedPerBlock) break;
        shared += b.sharedBytes();
        tails = std::move(with);
      }
    if (!tails.empty()) hosts.emplace_back(out.size(), tails);
    out.push_back(host);
    i = tails.empty() ? i + 1 : next;
  }
  if (hosts.empty()) return false;
  int64_t ticketed = 0;  // hosts of two blocks or more: a counter each
  for (const auto& h : hosts) ticketed += out[h.first].grid[0] > 1;
  const int counters = static_cast<int>(p.buffers.size());
  int64_t counter = 0;
  for (const auto& [at, tails] : hosts) {
    const bool ticket = out[at].grid[0] > 1;
    out[at] = withTails(out[at], tails, counters, ticket ? counter : -1, ticketed);
    counter += ticket;
  }
  if (ticketed > 0) {
    loop::Buffer buffer;
    buffer.kind = loop::Buffer::Kind::Counters;
    buffer.name = "tail_counters";
    buffer.dtype = DType::I64;
    buffer.shape = {ticketed};
    p.buffers.push_back(std::move(buffer));
  }
  p.kernels = std::move(out);
  return true;
}

}  // namespace kiln::kernel
