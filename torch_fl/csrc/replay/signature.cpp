// A call's signature (replay/signature.h).
#include "replay/signature.h"

#include "runtime/device.h"

#include <ATen/core/Tensor.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/TensorImpl.h>

#include <cstring>

namespace torch_fl {
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

}  // namespace replay
}  // namespace torch_fl
