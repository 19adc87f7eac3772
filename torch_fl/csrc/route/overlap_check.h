// Written arguments that partially overlap an input, for the routes whose
// kernel is not PyTorch's own.
//
// A native kernel checks this itself: RoutedArgs gives every argument over one
// flagos storage the same alias storage, so PyTorch's checks (TensorIterator,
// cat, index_select, ...) see what they would see on the backing device, and
// the CPU fallback's host copies keep it (route/cpu_fallback.h). A FlagGems
// kernel does not check: it would compute a silently wrong result where the
// native call raises. The Python routes call check_written_overlaps() first
// for calls whose arguments share a storage (RoutedArgs::shares_storage()), which raises
// PyTorch's own error, as TensorIterator does, where a written argument
// partially overlaps one that is not written.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <c10/util/ArrayRef.h>

namespace torch_fl {
namespace route {

// `args`: the call's arguments in schema order (flagos tensors or their aliases).
void check_written_overlaps(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args);

}  // namespace route
}  // namespace torch_fl
