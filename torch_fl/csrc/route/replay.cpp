// Replay of a recorded backend call (route/replay.h).
#include "route/replay.h"

#include "runtime/device.h"

#include <c10/core/DefaultDtype.h>
#include <c10/core/TensorImpl.h>

#include <cstring>

namespace torch_fl {
namespace route {
namespace replay {

namespace {

// Tags in a signature, so that different argument kinds never read alike.
enum Tag : int64_t {
  kTensor = 1,
  kUndefined,
  kWrappedNumber,
  kTensorList,
  kOptionalTensorList,
  kInt,
  kDouble,
  kBool,
  kNone,
  kString,
  kIntList,
  kDoubleList,
  kBoolList,
  kDevice,
};

int64_t bits(double d) {
  int64_t b = 0;
  std::memcpy(&b, &d, sizeof b);
  return b;
}

struct Keyer {
  Signature* out;
  c10::SmallVector<const c10::StorageImpl*, 8> storages;  // of the tensors so far, for the aliasing pattern

  void push(int64_t w) {
    out->words.push_back(w);
  }

  // False for a tensor a recording cannot be keyed on.
  bool tensor(const at::Tensor& t) {
    if (!t.defined()) {
      push(kUndefined);
      return true;
    }
    c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    if (impl->is_wrapped_number()) {
      // A Python number handed over as a tensor: its value is an argument.
      push(kWrappedNumber);
      push(static_cast<int64_t>(t.scalar_type()));
      switch (t.scalar_type()) {
        case c10::ScalarType::Double:
          push(bits(*t.const_data_ptr<double>()));
          return true;
        case c10::ScalarType::Long:
          push(*t.const_data_ptr<int64_t>());
          return true;
        case c10::ScalarType::Bool:
          push(*t.const_data_ptr<bool>() ? 1 : 0);
          return true;
        default:
          return false;  // complex numbers
      }
    }
    // Only flagos tensors of the usual kind: a host tensor's values could be
    // read by the backend's Python code, a sparse one has no single storage.
    if (t.device().type() != kFlagos || t.layout() != c10::kStrided || !impl->has_storage()) {
      return false;
    }
    push(kTensor);
    push(static_cast<int64_t>(t.scalar_type()));
    push(t.device().index());
    const int64_t dim = impl->dim();
    push(dim);
    for (int64_t s : impl->sizes()) {
      push(s);
    }
    for (int64_t s : impl->strides()) {
      push(s);
    }
    push(impl->storage_offset());
    // Triton specializes pointers on 16-byte alignment.
    push(static_cast<int64_t>(reinterpret_cast<uintptr_t>(impl->data()) & 15));
    push((impl->is_conj() ? 2 : 0) | (impl->is_neg() ? 1 : 0));
    // Which earlier tensor shares its storage (x + x, an out= that is an input).
    const c10::StorageImpl* storage = impl->unsafe_storage().unsafeGetStorageImpl();
    int64_t same = -1;
    for (size_t i = 0; i < storages.size(); ++i) {
      if (storages[i] == storage) {
        same = static_cast<int64_t>(i);
        break;
      }
    }
    push(same);
    storages.push_back(storage);
    return true;
  }

  bool value(const c10::IValue& v) {
    if (v.isTensor()) {
      return tensor(v.toTensor());
    }
    if (v.isNone()) {
      push(kNone);
      return true;
    }
    if (v.isInt()) {
      push(kInt);
      push(v.toInt());
      return true;
    }
    if (v.isDouble()) {
      push(kDouble);
      push(bits(v.toDouble()));
      return true;
    }
    if (v.isBool()) {
      push(kBool);
      push(v.toBool() ? 1 : 0);
      return true;
    }
    if (v.isTensorList()) {
      const auto list = v.toTensorList();
      push(kTensorList);
      push(static_cast<int64_t>(list.size()));
      for (size_t i = 0; i < list.size(); ++i) {
        if (!tensor(list.get(i))) {
          return false;
        }
      }
      return true;
    }
    if (v.isOptionalTensorList()) {
      const auto list = v.toOptionalTensorList();
      push(kOptionalTensorList);
      push(static_cast<int64_t>(list.size()));
      for (size_t i = 0; i < list.size(); ++i) {
        const std::optional<at::Tensor> t = list.get(i);
        if (!t.has_value()) {
          push(kNone);
        } else if (!tensor(*t)) {
          return false;
        }
      }
      return true;
    }
    if (v.isIntList()) {
      const auto list = v.toIntList();
      push(kIntList);
      push(static_cast<int64_t>(list.size()));
      for (size_t i = 0; i < list.size(); ++i) {
        push(list.get(i));
      }
      return true;
    }
    if (v.isDoubleList()) {
      const auto list = v.toDoubleList();
      push(kDoubleList);
      push(static_cast<int64_t>(list.size()));
      for (size_t i = 0; i < list.size(); ++i) {
        push(bits(list.get(i)));
      }
      return true;
    }
    if (v.isBoolList()) {
      const auto list = v.toBoolList();
      push(kBoolList);
      push(static_cast<int64_t>(list.size()));
      for (size_t i = 0; i < list.size(); ++i) {
        push(list.get(i) ? 1 : 0);
      }
      return true;
    }
    if (v.isString()) {
      const std::string& s = v.toStringRef();
      push(kString);
      push(static_cast<int64_t>(s.size()));
      for (size_t i = 0; i < s.size(); i += 8) {
        int64_t w = 0;
        std::memcpy(&w, s.data() + i, std::min<size_t>(8, s.size() - i));
        push(w);
      }
      return true;
    }
    if (v.isDevice()) {
      push(kDevice);
      push(static_cast<int64_t>(v.toDevice().type()));
      push(v.toDevice().index());
      return true;
    }
    // Generators (state outside the call), symbolic sizes, complex numbers.
    return false;
  }
};

uint64_t hash_words(const c10::SmallVector<int64_t, 48>& words) {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (int64_t w : words) {
    uint64_t x = static_cast<uint64_t>(w) + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    h ^= x;
  }
  return h;
}

// A tensor over a root slot's storage with a view's metadata: no dispatcher
// call (the recorded view operator's result, made directly).
at::Tensor make_view(const at::Tensor& root, const ViewSlot& v) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(root.storage()), root.key_set(),
                                                   c10::scalarTypeToTypeMeta(v.dtype));
  impl->set_sizes_and_strides(v.sizes, v.strides, v.storage_offset);
  return at::Tensor(std::move(impl));
}

struct Slots {
  const Program& p;
  c10::SmallVector<at::Tensor, 16> t;

  const at::Tensor& get(int32_t k) {
    at::Tensor& s = t[k];
    if (!s.defined()) {
      const auto& view = p.views[k];
      TORCH_INTERNAL_ASSERT(view.has_value(), "flagos replay: slot ", k, " used before its operator ran");
      s = make_view(get(view->root), *view);
    }
    return s;
  }
};

void run_op(const OpStep& step, Slots& slots) {
  torch::jit::Stack s;
  s.reserve(step.args.size());
  for (const ArgTemplate& a : step.args) {
    switch (a.kind) {
      case ArgTemplate::Kind::kConstant:
        s.push_back(a.constant);
        break;
      case ArgTemplate::Kind::kSlot:
        s.emplace_back(slots.get(a.slot));
        break;
      case ArgTemplate::Kind::kTensorList: {
        c10::List<at::Tensor> list;
        list.reserve(a.slots.size());
        for (int32_t k : a.slots) {
          list.push_back(slots.get(k));
        }
        s.emplace_back(std::move(list));
        break;
      }
      case ArgTemplate::Kind::kOptionalTensorList: {
        c10::List<std::optional<at::Tensor>> list;
        list.reserve(a.slots.size());
        for (int32_t k : a.slots) {
          list.push_back(k < 0 ? std::optional<at::Tensor>() : std::optional<at::Tensor>(slots.get(k)));
        }
        s.emplace_back(std::move(list));
        break;
      }
    }
  }
  step.op.callBoxed(&s);
  for (size_t j = 0; j < step.outs.size() && j < s.size(); ++j) {
    const auto& outs = step.outs[j];
    if (outs.size() == 1 && s[j].isTensor()) {
      if (outs[0] >= 0) {
        slots.t[outs[0]] = std::move(s[j]).toTensor();
      }
    } else if (s[j].isTensorList()) {
      auto list = s[j].toTensorList();
      TORCH_INTERNAL_ASSERT(list.size() == outs.size(), "flagos replay: ", step.op.schema().name(),
                            " returned a list of another length than when recorded");
      for (size_t i = 0; i < outs.size(); ++i) {
        if (outs[i] >= 0) {
          slots.t[outs[i]] = list.get(i);
        }
      }
    }
  }
}

void run_launch(const LaunchStep& step, Slots& slots, void* stream) {
  if (static_cast<uint64_t>(step.launch.grid[0]) * step.launch.grid[1] * step.launch.grid[2] == 0) {
    return;  // Triton launches nothing for an empty grid
  }
  const size_t n = step.bytes.size() / 8;
  c10::SmallVector<uint8_t, 256> bytes(step.bytes.begin(), step.bytes.end());
  for (size_t i = 0; i < step.ptr_params.size(); ++i) {
    const uint64_t p = reinterpret_cast<uint64_t>(slots.get(step.ptr_slots[i]).data_ptr()) +
                       static_cast<uint64_t>(step.ptr_offsets[i]);
    std::memcpy(bytes.data() + 8 * step.ptr_params[i], &p, 8);
  }
  c10::SmallVector<void*, 32> params(n);
  for (size_t i = 0; i < n; ++i) {
    params[i] = bytes.data() + 8 * i;
  }
  runtime::cuda_driver::launch(step.launch, stream, params.data(), step.name.c_str());
}

}  // namespace

bool signature_of(const torch::jit::Stack& stack, size_t nargs, Signature* out) {
  out->words.clear();
  // Factories without a dtype take the default one, without a device the current one.
  out->words.push_back(static_cast<int64_t>(c10::get_default_dtype_as_scalartype()));
  out->words.push_back(runtime::current_device());
  Keyer k{out, {}};
  for (size_t i = stack.size() - nargs; i < stack.size(); ++i) {
    if (!k.value(stack[i])) {
      return false;
    }
  }
  out->hash = hash_words(out->words);
  return true;
}

void input_tensors(const torch::jit::Stack& stack, size_t nargs, c10::SmallVector<at::Tensor, 8>* out) {
  auto add = [&](const at::Tensor& t) {
    if (t.defined() && !t.unsafeGetTensorImpl()->is_wrapped_number()) {
      out->push_back(t);
    }
  };
  for (size_t i = stack.size() - nargs; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor()) {
      add(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) {
        add(t);
      }
    } else if (v.isOptionalTensorList()) {
      for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
        if (t.has_value()) {
          add(*t);
        }
      }
    }
  }
}

void run(const Program& p, torch::jit::Stack* stack, size_t nargs, c10::DeviceIndex index) {
  Slots slots{p, {}};
  slots.t.resize(p.slots);
  {
    c10::SmallVector<at::Tensor, 8> in;
    input_tensors(*stack, nargs, &in);
    TORCH_INTERNAL_ASSERT(static_cast<int32_t>(in.size()) == p.inputs, "flagos replay: the call has ", in.size(),
                          " tensors, the recording ", p.inputs);
    for (size_t i = 0; i < in.size(); ++i) {
      slots.t[i] = std::move(in[i]);
    }
  }
  void* stream = nullptr;
  bool have_stream = false;
  for (const Step& step : p.steps) {
    if (step.is_launch) {
      if (!have_stream) {
        runtime::cuda_driver::ensure_context(index);
        stream = runtime::cuda_driver::current_stream(index);
        have_stream = true;
      }
      run_launch(p.launches[step.index], slots, stream);
    } else {
      run_op(p.ops[step.index], slots);
    }
  }
  torch::jit::drop(*stack, nargs);
  for (const ResultTemplate& r : p.results) {
    switch (r.kind) {
      case ResultTemplate::Kind::kTensor:
        stack->emplace_back(slots.get(r.slots[0]));
        break;
      case ResultTemplate::Kind::kNone:
        stack->emplace_back();
        break;
      case ResultTemplate::Kind::kTensorList: {
        c10::List<at::Tensor> list;
        for (int32_t k : r.slots) {
          list.push_back(slots.get(k));
        }
        stack->emplace_back(std::move(list));
        break;
      }
    }
  }
}

std::optional<Entry> Cache::find(const Signature& sig) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = buckets_.find(sig.hash);
  if (it == buckets_.end()) {
    return std::nullopt;
  }
  for (const auto& [s, e] : it->second.items) {
    if (s == sig) {
      return e;
    }
  }
  return std::nullopt;
}

int64_t Cache::store(const Signature& sig, Entry e) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& bucket = buckets_[sig.hash];
  for (auto& [s, old] : bucket.items) {
    if (s == sig) {
      programs_ += (e.program != nullptr) - (old.program != nullptr);
      old = std::move(e);
      return 0;
    }
  }
  int64_t evicted = 0;
  while (size_ >= capacity_ && !order_.empty()) {
    const Signature oldest = std::move(order_.front());
    order_.pop_front();
    auto b = buckets_.find(oldest.hash);
    if (b != buckets_.end()) {
      auto& items = b->second.items;
      for (auto i = items.begin(); i != items.end(); ++i) {
        if (i->first == oldest) {
          programs_ -= i->second.program != nullptr;
          items.erase(i);
          --size_;
          ++evicted;
          break;
        }
      }
      if (items.empty()) {
        buckets_.erase(b);
      }
    }
  }
  if (capacity_ == 0) {
    return evicted;
  }
  programs_ += e.program != nullptr;
  buckets_[sig.hash].items.emplace_back(sig, std::move(e));
  order_.push_back(sig);
  ++size_;
  return evicted;
}

void Cache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  buckets_.clear();
  order_.clear();
  size_ = 0;
  programs_ = 0;
}

size_t Cache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return size_;
}

size_t Cache::programs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return programs_;
}

void Cache::set_capacity(size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  capacity_ = n;
}

size_t Cache::capacity() const {
  std::lock_guard<std::mutex> lock(mu_);
  return capacity_;
}

}  // namespace replay
}  // namespace route
}  // namespace torch_fl
