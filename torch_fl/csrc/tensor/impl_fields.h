// A TensorImpl's fields, read and written directly.
//
// TensorImpl's accessors check the sizes policy and the symbolic-shape flag on
// every call, and its one setter of the dispatch keys
// (_change_backend_component_keys) recomputes them from scratch; on a routed
// call's path those checks would be most of a borrow's instructions
// (benchmarks/route_instructions.py). A borrow checks once that the tensor is
// plain (plain()) and reads the fields after that. Pointers to members formed
// inside a derived class reach the protected fields without a cast.
#pragma once

#include <c10/core/TensorImpl.h>

#include <optional>

namespace torch_fl {
namespace tensor {

struct ImplFields : c10::TensorImpl {
  // Default sizes and strides, not symbolic: what the fields below assume.
  static bool plain(const c10::TensorImpl& t) {
    return !(t.*(&ImplFields::matches_policy))(SizesStridesPolicy::CustomStrides) && !t.has_symbolic_sizes_strides();
  }
  static const c10::impl::SizesAndStrides& geometry(const c10::TensorImpl& t) {
    return t.*(&ImplFields::sizes_and_strides_);
  }
  static int64_t offset(const c10::TensorImpl& t) {
    return t.*(&ImplFields::storage_offset_);
  }
  static int64_t numel(const c10::TensorImpl& t) {
    return t.*(&ImplFields::numel_);
  }
  static std::optional<c10::Device>& device(c10::TensorImpl& t) {
    return t.*(&ImplFields::device_opt_);
  }
  static c10::DispatchKeySet& keys(c10::TensorImpl& t) {
    return t.*(&ImplFields::key_set_);
  }
};

// same_geometry() (tensor/alias.h) for two plain tensors.
inline bool same_plain_geometry(const c10::TensorImpl& a, const c10::TensorImpl& b) {
  const c10::impl::SizesAndStrides& x = ImplFields::geometry(a);
  const c10::impl::SizesAndStrides& y = ImplFields::geometry(b);
  const size_t n = x.size();
  if (n != y.size() || ImplFields::offset(a) != ImplFields::offset(b)) {
    return false;
  }
  const int64_t* xs = x.sizes_data();
  const int64_t* ys = y.sizes_data();
  const int64_t* xt = x.strides_data();
  const int64_t* yt = y.strides_data();
  for (size_t i = 0; i < n; ++i) {
    if (xs[i] != ys[i] || xt[i] != yt[i]) {
      return false;
    }
  }
  return true;
}

}  // namespace tensor
}  // namespace torch_fl
