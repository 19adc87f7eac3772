// Operators that run on flagos itself because they create, view or re-point
// storage (empty, view, as_strided, set_, resize_, _copy_from, ...).
#pragma once

namespace torch_fl {
namespace ops {

// Registers them at PrivateUse1 (each a core operator, ops/core_ops.h), and
// lets _copy_from pass through the Conjugate and Negative keys.
void register_metadata_ops();

}  // namespace ops
}  // namespace torch_fl
