// The cpu_fallback route's kernel on layout-keeping host copies
// (route/cpu_fallback.h says why).
#include "route/cpu_fallback.h"

#include "runtime/device.h"
#include "tensor/alias.h"
#include "tensor/ivalue_tensors.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <vector>

namespace torch_fl {
namespace route {

namespace {

// Host copies start at a multiple of this many bytes of their flagos storage,
// a multiple of every dtype's size, so each view's offset is whole elements.
constexpr int64_t kAlign = 16;

// The host copy of the bytes [lo, hi) of one flagos storage.
struct HostCopy {
  const c10::StorageImpl* storage;
  at::Tensor flagos;  // a flagos tensor over it
  int64_t lo;
  int64_t hi;
  at::Tensor bytes;  // uint8 on the CPU, hi - lo of them
  bool written = false;
};

// The bytes of its storage a tensor of elements spans: [begin, end).
std::pair<int64_t, int64_t> span_of(const at::Tensor& t) {
  const int64_t item = static_cast<int64_t>(t.dtype().itemsize());
  int64_t last = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    last += (t.size(d) - 1) * t.stride(d);
  }
  return {t.storage_offset() * item, (last + 1) * item};
}

bool on_flagos(const at::Tensor& t) {
  return t.defined() && t.device().type() == kFlagos;
}

// Replaces each tensor of an argument (a tensor, a list of tensors or of
// optional tensors: tensor::for_each_tensor's) by fn(tensor).
template <class Fn>
void replace_tensors(c10::IValue& v, Fn fn) {
  if (v.isTensor()) {
    v = fn(v.toTensor());
  } else if (v.isTensorList()) {
    c10::List<at::Tensor> list = v.toTensorList();
    c10::List<at::Tensor> out;
    out.reserve(list.size());
    for (const at::Tensor& t : list) {
      out.push_back(fn(t));
    }
    v = std::move(out);
  } else if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> list = v.toOptionalTensorList();
    c10::List<std::optional<at::Tensor>> out;
    out.reserve(list.size());
    for (std::optional<at::Tensor> t : list) {
      out.push_back(t.has_value() ? std::optional<at::Tensor>(fn(*t)) : std::nullopt);
    }
    v = std::move(out);
  }
}

// A uint8 tensor of the backing device over bytes [lo, hi) of `flagos`'s storage.
at::Tensor native_bytes(const at::Tensor& flagos, int64_t lo, int64_t hi) {
  const at::Tensor native = tensor::native_alias(flagos, /*owning=*/true);
  at::Tensor bytes = at::empty({0}, native.options().dtype(at::kByte));
  bytes.set_(native.storage(), lo, {hi - lo}, {1});
  return bytes;
}

// A CPU view of `t` (flagos) over its storage's host copy.
at::Tensor host_view(const at::Tensor& t, const HostCopy& copy) {
  const int64_t item = static_cast<int64_t>(t.dtype().itemsize());
  at::Tensor view = at::empty({0}, at::TensorOptions().dtype(t.scalar_type()));
  const int64_t offset = t.numel() == 0 ? 0 : (t.storage_offset() * item - copy.lo) / item;
  view.set_(copy.bytes.storage(), offset, t.sizes(), t.strides());
  if (C10_UNLIKELY(t.is_conj())) {
    view.unsafeGetTensorImpl()->_set_conj(true);
  }
  if (C10_UNLIKELY(t.is_neg())) {
    view.unsafeGetTensorImpl()->_set_neg(true);
  }
  return view;
}

// The flagos tensor `f`, written by a kernel that resized its host view to
// `host`: takes the host result's sizes and strides, then its elements.
void take_resized(const at::Tensor& f, const at::Tensor& host) {
  int64_t extent = host.numel() == 0 ? 0 : 1;
  for (int64_t d = 0; d < host.dim() && extent > 0; ++d) {
    extent += (host.size(d) - 1) * host.stride(d);
  }
  f.resize_({extent});
  f.as_strided_(host.sizes(), host.strides(), f.storage_offset());
  f.copy_(host);
}

}  // namespace

void run_on_host_copies(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DeviceIndex index) {
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  const size_t first = stack->size() - nargs;

  // 1. The bytes each flagos storage's tensors span, and whether the call writes it.
  c10::SmallVector<HostCopy, 4> copies;
  auto copy_of = [&](const at::Tensor& t) -> HostCopy& {
    const c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
    for (HostCopy& c : copies) {
      if (c.storage == s) {
        return c;
      }
    }
    copies.push_back(HostCopy{s, t, INT64_MAX, 0, at::Tensor()});
    return copies.back();
  };
  for (size_t k = 0; k < nargs; ++k) {
    const auto* alias = schema.arguments()[k].alias_info();
    const bool written = alias != nullptr && alias->isWrite();
    tensor::for_each_tensor((*stack)[first + k], [&](const at::Tensor& t, tensor::TensorIn) {
      if (!on_flagos(t)) {
        return;
      }
      if (index < 0) {
        index = t.device().index();  // the first flagos tensor's, in a list too
      }
      if (!t.has_storage()) {
        return;
      }
      HostCopy& c = copy_of(t);
      c.written |= written;
      if (t.numel() > 0) {
        const auto [begin, end] = span_of(t);
        c.lo = std::min(c.lo, begin / kAlign * kAlign);
        c.hi = std::max(c.hi, end);
      }
    });
  }
  for (HostCopy& c : copies) {
    if (c.hi <= c.lo) {
      c.lo = c.hi = 0;  // only empty tensors on it
    }
    c.bytes = at::empty({c.hi - c.lo}, at::TensorOptions().dtype(at::kByte));
    if (c.hi > c.lo) {
      c.bytes.copy_(native_bytes(c.flagos, c.lo, c.hi));
    }
  }

  // 2. Every flagos argument becomes a view of its storage's host copy; a
  // tensor passed twice, one view (PyTorch's kernels tell x from a copy of x).
  std::vector<c10::IValue> originals(stack->begin() + static_cast<std::ptrdiff_t>(first), stack->end());
  c10::SmallVector<std::pair<const c10::TensorImpl*, at::Tensor>, 8> views;
  for (size_t k = 0; k < nargs; ++k) {
    replace_tensors((*stack)[first + k], [&](const at::Tensor& t) {
      if (!on_flagos(t) || !t.has_storage()) {
        return t;
      }
      for (const auto& [impl, view] : views) {
        if (impl == t.unsafeGetTensorImpl()) {
          return view;
        }
      }
      views.emplace_back(t.unsafeGetTensorImpl(), host_view(t, copy_of(t)));
      return views.back().second;
    });
  }
  // A flagos device argument (factories, *_like) is the CPU's for the kernel; the results go there after.
  for (size_t k = 0; k < nargs; ++k) {
    c10::IValue& v = (*stack)[first + k];
    if (v.isDevice() && v.toDevice().type() == kFlagos) {
      v = c10::IValue(c10::Device(c10::DeviceType::CPU));
    }
  }
  std::vector<c10::IValue> host_args(stack->begin() + static_cast<std::ptrdiff_t>(first), stack->end());

  // 3. The CPU kernel: it raises before anything reaches flagos memory.
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);

  // 4. Written storages back; written arguments the kernel resized take its geometry.
  for (const HostCopy& c : copies) {
    if (c.written && c.hi > c.lo) {
      native_bytes(c.flagos, c.lo, c.hi).copy_(c.bytes);
    }
  }
  for (size_t k = 0; k < nargs; ++k) {
    const auto* alias = schema.arguments()[k].alias_info();
    if (alias == nullptr || !alias->isWrite() || !originals[k].isTensor()) {
      continue;
    }
    const at::Tensor& f = originals[k].toTensor();
    const at::Tensor& host = host_args[k].toTensor();
    if (on_flagos(f) && (host.sizes() != f.sizes() || host.strides() != f.strides() ||
                         host.storage().unsafeGetStorageImpl() != copy_of(f).bytes.storage().unsafeGetStorageImpl())) {
      take_resized(f, host);
    }
  }

  // 5. Results: a returned argument is the caller's flagos tensor; a new one
  // goes to the call's device argument where it names one (ones_like(x,
  // device="cpu") stays on the CPU, full_like(x, v, device="flagos:0") of an
  // x on flagos:1 goes to flagos:0), else to flagos:index.
  c10::Device device(kFlagos, index < 0 ? runtime::current_device() : index);
  for (size_t k = 0; k < nargs; ++k) {
    if (originals[k].isDevice()) {
      const c10::Device d = originals[k].toDevice();
      device = d.type() == kFlagos && !d.has_index() ? c10::Device(kFlagos, runtime::current_device()) : d;
      break;
    }
  }
  const auto& returns = schema.returns();
  const size_t rfirst = stack->size() - returns.size();
  for (size_t r = 0; r < returns.size(); ++r) {
    c10::IValue& v = (*stack)[rfirst + r];
    const auto* ralias = returns[r].alias_info();
    if (ralias != nullptr) {
      bool found = false;
      for (size_t k = 0; k < nargs && !found; ++k) {
        const auto* alias = schema.arguments()[k].alias_info();
        if (alias != nullptr && alias->beforeSets() == ralias->beforeSets()) {
          v = originals[k];
          found = true;
        }
      }
      if (found) {
        continue;
      }
    }
    replace_tensors(v, [&](const at::Tensor& t) { return t.defined() && t.device() != device ? t.to(device) : t; });
  }
}

}  // namespace route
}  // namespace torch_fl
