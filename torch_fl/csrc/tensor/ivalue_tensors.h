// The tensors of a boxed argument: the one walk over an IValue's tensors that
// the checks of a call share (route/device_check.cpp, route/overlap_check.cpp)
// and replay's slot order (replay/program.cpp, input_tensors).
//
// Header-only and inline: a caller's lambda is inlined into the walk, and the
// walk reads the list's elements in place (IValue::toListRef) rather than
// copying them into a vector: a copy of a tensor only Python holds takes the
// GIL twice (torch's PyObject preservation). RoutedArgs::unwrap, which swaps
// the elements of a call's lists for aliases as it goes, walks them itself.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/macros/Macros.h>

#include <cstdint>

namespace torch_fl {
namespace tensor {

// What a tensor was in its argument.
enum class TensorIn : uint8_t {
  kTensor,        // the argument itself (Tensor, or a Tensor? that is not None; maybe undefined)
  kList,          // an element of a Tensor[] (maybe undefined)
  kOptionalList,  // an element of a Tensor?[] that is not None
};

// Calls f(tensor, TensorIn) for each tensor `v` holds, in order: a Tensor, the
// elements of a Tensor[], the elements of a Tensor?[] that are not None.
// Anything else (None, numbers, lists of numbers) holds none.
template <class F>
C10_ALWAYS_INLINE void for_each_tensor(const c10::IValue& v, F&& f) {
  if (v.isTensor()) {
    f(v.toTensor(), TensorIn::kTensor);
  } else if (v.isTensorList()) {
    for (const c10::IValue& e : v.toListRef()) {
      f(e.toTensor(), TensorIn::kList);
    }
  } else if (v.isOptionalTensorList()) {
    for (const c10::IValue& e : v.toListRef()) {
      if (!e.isNone()) {
        f(e.toTensor(), TensorIn::kOptionalList);
      }
    }
  }
}

}  // namespace tensor
}  // namespace torch_fl
