// The typed Kernel IR operations' shared queries (kiln/kernel/ops.h).
#include "kiln/kernel/ops.h"

#include "kiln/support/overloaded.h"

namespace kiln::kernel::op {
namespace {
template <class T>
concept NamesMbarrier = requires(const T& o) { o.barrier; };
template <class T>
concept NamesCounter = requires(const T& o) { o.counter; };
template <class T>
concept IndexesMemory = requires(const T& o) { o.index; };
}  // namespace

const Mbarrier* mbarrierOf(const Payload& p) {
  return std::visit(
      [](const auto& o) -> const Mbarrier* {
        if constexpr (NamesMbarrier<std::decay_t<decltype(o)>>) return &o.barrier;
        else return nullptr;
      },
      p);
}

std::vector<const Idx*> indices(const Payload& p) {
  using List = std::vector<const Idx*>;
  return std::visit(Overloaded{[](const MbarrierWait& o) { return List{&o.barrier.index, &o.parity}; },
                               [](const TmaLoad& o) { return List{&o.sharedIndex, &o.row, &o.col, &o.barrier.index}; },
                               [](const CpAsync& o) {
                                 List l{&o.sharedIndex, &o.globalIndex};
                                 if (o.validBytes) l.push_back(&o.validBytes);
                                 return l;
                               },
                               [](const CounterAwait& o) { return List{&o.counter.index, &o.count}; },
                               [](const DefIdx& o) { return List{&o.value}; },
                               [](const For& o) { return List{&o.begin, &o.end}; },
                               [](const If& o) { return List{&o.lhs, &o.rhs}; },
                               [](const auto& o) {
                                 using T = std::decay_t<decltype(o)>;
                                 if constexpr (NamesMbarrier<T>) return List{&o.barrier.index};
                                 else if constexpr (NamesCounter<T>) return List{&o.counter.index};
                                 else if constexpr (IndexesMemory<T>) return List{&o.index};
                                 else return List{};
                               }},
                    p);
}

std::vector<const FE*> floatValues(const Payload& p) {
  if (auto* set = std::get_if<Assign>(&p)) return {&set->value};
  if (auto* store = std::get_if<StoreGlobal>(&p)) return {&store->value};
  if (auto* store = std::get_if<StoreShared>(&p)) return {&store->value};
  std::vector<const FE*> values;
  if (auto* store = std::get_if<StoreVector>(&p))
    for (const FE& v : store->values) values.push_back(&v);
  return values;
}

std::vector<int> floatSlotsWritten(const Payload& p) {
  if (auto* set = std::get_if<Assign>(&p)) return {set->slot};
  if (auto* load = std::get_if<LoadVector>(&p)) return load->slots;
  if (auto* load = std::get_if<LoadSharedVector>(&p)) return load->slots;
  return {};
}

int definedVar(const Payload& p) {
  if (auto* def = std::get_if<DefIdx>(&p)) return def->var;
  if (auto* loop = std::get_if<For>(&p)) return loop->var;
  if (auto* ticket = std::get_if<BlockTicket>(&p)) return ticket->var;
  return -1;
}

bool isElected(const Payload& p) {
  if (auto* tma = std::get_if<TmaLoad>(&p)) return tma->elected;
  if (auto* expect = std::get_if<MbarrierExpectTx>(&p)) return expect->elected;
  return false;
}

}  // namespace kiln::kernel::op
