// Operators that run on flagos itself because they create, view or re-point
// storage (empty, view, as_strided, set_, resize_, _copy_from, ...): the
// kernels, registered at PrivateUse1 by ops/register.cpp (each a core
// operator, ops/core_ops.h).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>
#include <c10/core/Stream.h>

#include <optional>

namespace torch_fl {
namespace ops {

at::Tensor empty_memory_format(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format);
at::Tensor empty_strided(at::IntArrayRef size, at::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory);
const at::Tensor& resize_(const at::Tensor& self, at::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format);
at::Tensor& set_storage_offset(at::Tensor& self, c10::Storage source, int64_t offset, at::IntArrayRef size,
                               at::IntArrayRef stride);
at::Tensor& set_storage(at::Tensor& self, c10::Storage source);
at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source);
at::Tensor& set_empty(at::Tensor& self);
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking);
at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst);
void record_stream(at::Tensor& self, c10::Stream stream);
at::Tensor efficientzerotensor(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory);
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from);

// Never filled: what at::detail::empty_strided_cuda is to CUDA.
at::Tensor empty_strided_unfilled(at::IntArrayRef size, at::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                                  std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                                  std::optional<bool> pin_memory);

// aten::empty_strided on flagos:index (-1: the current device) without the dispatcher: the allocation
// function of inductor's flagos wrappers (python/module.cpp). Never filled under deterministic algorithms, as
// inductor's CUDA buffers (at::detail::empty_strided_cuda) are not.
at::Tensor empty_strided_on(at::IntArrayRef size, at::IntArrayRef stride, at::ScalarType dtype,
                            c10::DeviceIndex index);

}  // namespace ops
}  // namespace torch_fl
