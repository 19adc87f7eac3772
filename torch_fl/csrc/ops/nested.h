// Nested tensors of the strided layout on flagos: refused where they are made
// and where one is used (ops/nested.cpp).
#pragma once

namespace torch_fl {
namespace ops {

void register_nested_refusal();

}  // namespace ops
}  // namespace torch_fl
