// What the typed kernels of the native route (route/typed_native.cpp), the
// typed fronts of Python routes (python/typed_fronts.cpp) and the autograd
// kernels (autograd/autograd_shortcut.cpp) share: the name an operator is
// registered under, how many tensors an argument brings, and the results of a
// call on aliases turned back into flagos tensors.
#pragma once

#include "route/routed_args.h"

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace torch_fl {
namespace route {
namespace typed {

// The overload an at::_ops entry names, as torch::Library::impl takes it:
// "add.Tensor", "mm".
template <class Op>
std::string overload_of() {
  std::string name = std::string(Op::name).substr(6);  // without "aten::"
  if (Op::overload_name[0] != '\0') {
    name += std::string(".") + Op::overload_name;
  }
  return name;
}

// How many tensors an argument brings (RoutedArgs::reserve).
template <class T>
size_t tensors_in(const T&) {
  return 0;
}
inline size_t tensors_in(const at::Tensor&) {
  return 1;
}
inline size_t tensors_in(const std::optional<at::Tensor>&) {
  return 1;
}
inline size_t tensors_in(at::TensorList list) {
  return list.size();
}
inline size_t tensors_in(const at::ITensorListRef& list) {
  return list.size();
}
inline size_t tensors_in(const c10::List<std::optional<at::Tensor>>& list) {
  return list.size();
}

// -------------------------------------------------------------- results
template <class T>
T wrap(RoutedArgs&, T&& v) {
  return std::forward<T>(v);  // scalars, bools, SymInts
}

inline at::Tensor wrap(RoutedArgs& a, at::Tensor&& t) {
  return a.result(std::move(t));
}

inline std::vector<at::Tensor> wrap(RoutedArgs& a, std::vector<at::Tensor>&& ts) {
  for (auto& t : ts) {
    t = a.result(std::move(t));
  }
  return std::move(ts);
}

template <class... Ts>
std::tuple<Ts...> wrap(RoutedArgs& a, std::tuple<Ts...>&& ts) {
  return std::apply([&](auto&&... v) { return std::tuple<Ts...>{wrap(a, std::move(v))...}; }, std::move(ts));
}

}  // namespace typed
}  // namespace route
}  // namespace torch_fl
