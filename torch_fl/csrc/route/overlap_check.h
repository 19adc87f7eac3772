// Written arguments that partially overlap an input, for the routes whose
// kernel is not PyTorch's own.
//
// A native kernel checks this itself: RoutedArgs gives every argument over one
// flagos storage the same alias storage, so PyTorch's checks (TensorIterator,
// cat, index_select, ...) see what they would see on the backing device. A
// FlagGems kernel does not check, and the CPU fallback copies each argument to
// the host on its own, where no overlap is left to see: both would compute a
// silently wrong result where the native call raises. These routes call
// check_written_overlaps() first (the Python routes only for calls whose
// arguments share a storage, RoutedArgs::shares_storage()), which raises
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
