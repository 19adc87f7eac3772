// Operators that must run on flagos itself because they create, view or
// re-point storage: views share one storage, and data_ptr() is real.
#include "ops/metadata_ops.h"

#include "ops/core_ops.h"
#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/library.h"
#include "tensor/alias.h"

#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/native/ResizeCommon.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/library.h>

namespace torch_fl {
namespace ops {

using runtime::flagos_allocator;
using runtime::resize_storage_bytes;

namespace {

c10::Device target_device(std::optional<c10::Device> device) {
  c10::Device d = device.value_or(c10::Device(kFlagos));
  TORCH_CHECK(d.type() == kFlagos, "flagos: expected a flagos device, got ", d);
  return d.has_index() ? d : c10::Device(kFlagos, runtime::current_device());
}

void check_factory(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(!pin_memory.value_or(false),
              "flagos: pin_memory=True applies to host tensors; create the tensor on 'cpu' with pin_memory=True "
              "and copy it to flagos with non_blocking=True");
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided, "flagos: only the strided layout is supported, got ",
              *layout);
}

// torch.use_deterministic_algorithms(True) with
// torch.utils.deterministic.fill_uninitialized_memory (the default): new
// memory is filled, NaN for floating and complex dtypes, the largest value for
// integers, as CPU's and CUDA's empty, empty_strided and resize_ do
// (at::native's "Enabling Deterministic Operations" note).
inline bool fill_uninitialized() {
  auto& ctx = at::globalContext();
  return C10_UNLIKELY(ctx.deterministicAlgorithms() && ctx.deterministicFillUninitializedMemory());
}

}  // namespace

at::Tensor empty_memory_format(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  check_factory(layout, pin_memory);
  c10::DeviceGuard guard(target_device(device));
  at::Tensor t = at::detail::empty_generic(size, flagos_allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype), memory_format);
  if (fill_uninitialized()) {
    at::native::fill_empty_deterministic_(t);
  }
  return t;
}

// Never filled: what at::detail::empty_strided_cuda is to CUDA (inductor's buffers, empty_strided_on).
at::Tensor empty_strided_unfilled(at::IntArrayRef size, at::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                                  std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                                  std::optional<bool> pin_memory) {
  check_factory(layout, pin_memory);
  c10::DeviceGuard guard(target_device(device));
  return at::detail::empty_strided_generic(size, stride, flagos_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

at::Tensor empty_strided(at::IntArrayRef size, at::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  at::Tensor t = empty_strided_unfilled(size, stride, dtype, layout, device, pin_memory);
  if (fill_uninitialized()) {
    at::native::fill_empty_deterministic_(t);
  }
  return t;
}

namespace {

// Makes the storage large enough for the tensor's current geometry.
void fit_storage(const at::Tensor& self) {
  auto* impl = self.unsafeGetTensorImpl();
  if (impl->numel() == 0) {
    return;
  }
  const size_t needed = at::detail::computeStorageNbytes(impl->sizes(), impl->strides(), self.dtype().itemsize(),
                                                         impl->storage_offset());
  c10::StorageImpl* storage = impl->storage().unsafeGetStorageImpl();
  if (needed > storage->nbytes()) {
    resize_storage_bytes(storage, needed);
  }
}

}  // namespace

const at::Tensor& resize_(const at::Tensor& self, at::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  if (impl->sizes() == size && !memory_format) {
    return self;
  }
  impl->set_sizes_contiguous(size);
  if (memory_format) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve, "Unsupported memory format ", *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  const auto old_nbytes = static_cast<int64_t>(impl->storage().nbytes());
  fit_storage(self);
  if (fill_uninitialized()) {
    at::native::fill_resize_deterministic_(self, old_nbytes);  // only the bytes the storage grew by
  }
  return self;
}

at::Tensor& set_storage_offset(at::Tensor& self, c10::Storage source, int64_t offset, at::IntArrayRef size,
                               at::IntArrayRef stride) {
  at::native::checkSetStorage(self, source, offset, size, stride);
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_offset(offset);
  if (stride.data() != nullptr) {
    impl->set_sizes_and_strides(size, stride);
  } else {
    impl->set_sizes_contiguous(size);
  }
  fit_storage(self);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source) {
  const int64_t n = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage_offset(self, std::move(source), 0, {n}, {});
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.unsafeGetTensorImpl() == source.unsafeGetTensorImpl()) {
    return self;
  }
  return set_storage_offset(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, flagos_allocator(), true);
  return set_storage_offset(self, std::move(empty), 0, {0}, {});
}

namespace {

// The native alias of a flagos tensor, else the tensor itself, by reference:
// a copy of a tensor only Python holds would take the GIL (route::RoutedArgs::arg).
c10::MaybeOwned<at::Tensor> to_native_or_self(const at::Tensor& t) {
  if (t.device().type() == kFlagos) {
    return c10::MaybeOwned<at::Tensor>::owned(tensor::native_alias(t, /*owning=*/false));
  }
  return c10::MaybeOwned<at::Tensor>::borrowed(t);
}

}  // namespace

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  to_native_or_self(dst)->copy_(*to_native_or_self(self), non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) {
    dst.resize_(self.sizes());
  }
  return copy_from(self, dst, false);
}

void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == kFlagos, "flagos: record_stream expects a flagos stream, got one of ",
              stream.device());
  c10::impl::VirtualGuardImpl impl(kFlagos);
  impl.recordDataPtrOnStream(self.storage().data_ptr(), stream);
}

// c10's TensorImpl::has_compatible_shallow_copy_type lists only in-tree dense
// backends, so `param.data = flagos_tensor` (what Module.to does) is refused
// and Module._apply replaces each Parameter instead, silently untying shared
// weights (tied embeddings end up as two copies). PyTorch leaves the answer
// for PrivateUse1 to the backend, as OpenReg does.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  const auto a = self.key_set();
  const auto b = from.key_set();
  if (a == b) {
    return true;
  }
  constexpr auto dense_backends =
      c10::DispatchKeySet({c10::BackendComponent::CPUBit, c10::BackendComponent::CUDABit,
                           c10::BackendComponent::HIPBit, c10::BackendComponent::XPUBit,
                           c10::BackendComponent::MPSBit, c10::BackendComponent::PrivateUse1Bit});
  constexpr auto dense = c10::DispatchKeySet(c10::DispatchKey::Dense);
  auto is_dense = [&](c10::DispatchKeySet ks) { return ks.has_any(dense) && ks.has_any(dense_backends); };
  return is_dense(a) && is_dense(b);
}

namespace {

// A zero tensor (ZeroTensor key) owns no memory; the ZeroTensor fallback
// materialises it when an operator needs the values.
struct ZeroTensorAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t) override {
    return c10::DataPtr(nullptr, c10::Device(kFlagos, runtime::current_device()));
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return nullptr;
  }
  void copy_data(void*, const void*, std::size_t) const override {}
};
ZeroTensorAllocator zero_allocator;

}  // namespace

at::Tensor efficientzerotensor(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory) {
  check_factory(layout, pin_memory);
  c10::DeviceGuard guard(target_device(device));
  const auto keys =
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1) | c10::DispatchKeySet(c10::DispatchKey::ZeroTensor);
  return at::detail::empty_generic(size, &zero_allocator, keys, c10::dtype_or_default(dtype), std::nullopt);
}

at::Tensor empty_strided_on(at::IntArrayRef size, at::IntArrayRef stride, at::ScalarType dtype,
                            c10::DeviceIndex index) {
  // Inductor's buffers are on the current device nearly always: then no device guard (it would set the device
  // twice per buffer, and the allocator allocates on the current device anyway).
  if (index < 0 || index == runtime::current_device()) {
    return at::detail::empty_strided_generic(size, stride, flagos_allocator(),
                                             c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype);
  }
  return empty_strided_unfilled(size, stride, dtype, std::nullopt, c10::Device(kFlagos, index), std::nullopt);
}

}  // namespace ops
}  // namespace torch_fl
