// The typed Kernel IR operations' shared queries (kiln/kernel/ops.h).
#include "kiln/kernel/ops.h"

#include <type_traits>

#include "kiln/support/overloaded.h"

namespace kiln::kernel::op {
namespace {
// Whether payload alternative T names an mbarrier (the mbarrier family and tma.load), a counter, or one index of memory.
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
                               [](const Mma& o) {
                                 List l;
                                 if (auto* shared = std::get_if<MmaFromShared>(&o.operands)) {
                                   for (const Idx& e : shared->aPairs) l.push_back(&e);
                                   for (const Idx& e : shared->bPairs) l.push_back(&e);
                                 }
                                 return l;
                               },
                               [](const Ldmatrix& o) { return List{&o.rowIndex}; },
                               [](const Wgmma& o) {
                                 List l;
                                 if (o.scaleD) l.push_back(&o.scaleD);
                                 if (auto* a = std::get_if<SharedMatrix>(&o.a)) l.push_back(&a->start);
                                 l.push_back(&o.b.start);
                                 return l;
                               },
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

std::vector<int> floatSlots(const Payload& p) {
  using List = std::vector<int>;
  auto join = [](List l, const List& more) {
    l.insert(l.end(), more.begin(), more.end());
    return l;
  };
  return std::visit(
      Overloaded{[&](const Mma& o) {
                   auto* slots = std::get_if<MmaFromSlots>(&o.operands);
                   return slots ? join(join(slots->a, slots->b), o.c) : o.c;
                 },
                 [](const Ldmatrix& o) {
                   auto* slots = std::get_if<FloatSlots>(&o.into);
                   return slots ? slots->slots : List{};
                 },
                 [](const Wgmma& o) { return o.acc; }, [](const PackPair& o) { return List{o.lo, o.hi}; },
                 [](const ShuffleXor& o) { return List{o.dst, o.src}; }, [](const Assign& o) { return List{o.slot}; },
                 [](const LoadVector& o) { return o.slots; }, [](const LoadSharedVector& o) { return o.slots; },
                 [](const auto&) { return List{}; }},
      p);
}

int Ldmatrix::matrices() const {
  return std::visit(Overloaded{[](const FloatSlots& s) { return static_cast<int>(s.slots.size()) / 2; },
                               [](const PairRegs& r) { return static_cast<int>(r.regs.size()); }},
                    into);
}

}  // namespace kiln::kernel::op
