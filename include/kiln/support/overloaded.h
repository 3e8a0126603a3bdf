// Overloaded{lambda, lambda, ...}: one visitor for std::visit made of a lambda per alternative.
#pragma once

namespace kiln {
template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;
}  // namespace kiln
