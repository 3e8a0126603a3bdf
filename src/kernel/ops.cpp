// The typed Kernel IR operations' shared queries (kiln/kernel/ops.h).
#include "kiln/kernel/ops.h"

#include "kiln/support/overloaded.h"

namespace kiln::kernel::op {
const Mbarrier* mbarrierOf(const Payload& p) {
  return std::visit(Overloaded{[](const std::monostate&) -> const Mbarrier* { return nullptr; },
                               [](const auto& o) -> const Mbarrier* { return &o.barrier; }},
                    p);
}

std::vector<const Idx*> indices(const Payload& p) {
  return std::visit(Overloaded{[](const std::monostate&) { return std::vector<const Idx*>{}; },
                               [](const MbarrierWait& o) { return std::vector<const Idx*>{&o.barrier.index, &o.parity}; },
                               [](const TmaLoad& o) {
                                 return std::vector<const Idx*>{&o.sharedIndex, &o.row, &o.col, &o.barrier.index};
                               },
                               [](const auto& o) { return std::vector<const Idx*>{&o.barrier.index}; }},
                    p);
}

bool isElected(const Payload& p) {
  if (auto* tma = std::get_if<TmaLoad>(&p)) return tma->elected;
  if (auto* expect = std::get_if<MbarrierExpectTx>(&p)) return expect->elected;
  return false;
}

}  // namespace kiln::kernel::op
