// torch.distributed's collectives on flagos tensors, by the group's backend for
// the backing device (route/collectives.h).
//
// A plain ProcessGroup (init_process_group("nccl") or ("gloo"), new_group of
// one) dispatches each collective, a c10d:: operator, by its tensors' key.
// PyTorch's PrivateUse1 kernels ask the group for a backend of the flagos
// device, which only the flagos backend registers: code written for CUDA,
// which names its backend, failed with "No backend type associated with device
// type flagos". PrivateUse1 is flagos's own key, so flagos gives these
// operators its kernel, as it does ATen's: the collective runs on the flagos
// tensors' zero-copy aliases through the backing device's kernel, which calls
// the group's backend for that device (NCCL or gloo on a CUDA backing, gloo on
// host memory). The results are the flagos tensors' own bytes. A
// FlagosProcessGroup registers its engines for the backing device too, so its
// C++ callers (those PyTorch's trampoline does not forward to its Python
// methods) take the same path.
//
// The aliases own their flagos storage: a Work that keeps its tensors until it
// completes keeps the flagos memory alive, as it would keep a CUDA tensor's.
// The Work is wrapped so that its result and future hold the caller's flagos
// tensors, not the aliases, as CUDA's hold the caller's tensors (DDP's reducer
// takes its gradients from the future's value).
#include "route/collectives.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "route/counters.h"
#include "runtime/device.h"
#include "tensor/alias.h"

#if __has_include(<torch/csrc/distributed/c10d/ProcessGroup.hpp>)
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#define TORCH_FL_HAS_C10D 1
#else
#define TORCH_FL_HAS_C10D 0
#endif

namespace torch_fl {
namespace route {

namespace {

template <class Map>
c10::intrusive_ptr<c10::ivalue::Future> future_mapped(const c10::intrusive_ptr<c10::ivalue::Future>& source,
                                                      c10::TypePtr type, std::vector<c10::Device> devices, Map map) {
  auto mapped = c10::make_intrusive<c10::ivalue::Future>(std::move(type), std::move(devices));
  source->addCallback([mapped, map = std::move(map)](c10::ivalue::Future& done) {
    if (done.hasError()) {
      mapped->setError(done.exception_ptr());
    } else {
      mapped->markCompleted(map(done.value()));
    }
  });
  return mapped;
}

}  // namespace

c10::intrusive_ptr<c10::ivalue::Future> future_completed_with(const c10::intrusive_ptr<c10::ivalue::Future>& source,
                                                              c10::IValue value, std::vector<c10::Device> devices) {
  return future_mapped(source, c10::ListType::ofTensors(), std::move(devices),
                       [value = std::move(value)](const c10::IValue&) { return value; });
}

#if TORCH_FL_HAS_C10D

namespace {

using runtime::g_backing;

// `v` with f(tensor) in place of each tensor, in lists and lists of lists.
template <class F>
c10::IValue map_tensors(const c10::IValue& v, const F& f) {
  if (v.isTensor()) {
    return f(v.toTensor());
  }
  if (v.isList()) {
    c10::List<c10::IValue> list = v.toList();
    c10::impl::GenericList out(list.elementType());
    out.reserve(list.size());
    for (const c10::IValue& e : list) {
      out.push_back(map_tensors(e, f));
    }
    return out;
  }
  return v;
}

// The flagos tensors of one collective, by the TensorImpl of their aliases.
class FlagosOf {
 public:
  // `v` with each flagos tensor replaced by an owning alias.
  c10::IValue to_native(const c10::IValue& v) {
    return map_tensors(v, [this](const at::Tensor& t) -> c10::IValue {
      if (!t.defined() || t.device().type() != kFlagos) {
        return t;
      }
      at::Tensor alias = tensor::native_alias(t, /*owning=*/true);
      pairs_.emplace_back(alias.unsafeGetTensorImpl(), t);
      const c10::Device d = t.device();
      if (std::find(devices_.begin(), devices_.end(), d) == devices_.end()) {
        devices_.push_back(d);
      }
      return alias;
    });
  }

  // `v` with each alias made by to_native replaced by its flagos tensor.
  c10::IValue to_flagos(const c10::IValue& v) const {
    return map_tensors(v, [this](const at::Tensor& t) -> c10::IValue {
      for (const auto& [alias, flagos] : pairs_) {
        if (alias == t.unsafeGetTensorImpl()) {
          return flagos;
        }
      }
      return t;
    });
  }

  bool empty() const { return pairs_.empty(); }
  const std::vector<c10::Device>& devices() const { return devices_; }

 private:
  std::vector<std::pair<const c10::TensorImpl*, at::Tensor>> pairs_;
  std::vector<c10::Device> devices_;
};

// The backend's Work with the caller's flagos tensors as its result and its
// future's value; waiting, completion and errors are the backend's.
class FlagosWork final : public c10d::Work {
 public:
  FlagosWork(c10::intrusive_ptr<c10d::Work> inner, std::shared_ptr<const FlagosOf> flagos)
      : c10d::Work(-1, inner->retrieveOpType()), inner_(std::move(inner)), flagos_(std::move(flagos)) {}

  bool isCompleted() override { return inner_->isCompleted(); }
  bool isSuccess() const override { return inner_->isSuccess(); }
  std::exception_ptr exception() const override { return inner_->exception(); }
  int sourceRank() const override { return inner_->sourceRank(); }
  void synchronize() override { inner_->synchronize(); }
  bool wait(std::chrono::milliseconds timeout) override { return inner_->wait(timeout); }
  void blockCurrentStream() override { inner_->blockCurrentStream(); }
  void abort() override { inner_->abort(); }
  c10::intrusive_ptr<c10::ivalue::Future> getFutureResult() override { return inner_->getFutureResult(); }
  float getDuration() const override { return inner_->getDuration(); }
  uint64_t getSequencenumber() const override { return inner_->getSequencenumber(); }

  std::vector<at::Tensor> result() override {
    return flagos_->to_flagos(c10::IValue(inner_->result())).toTensorVector();
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    std::lock_guard<std::mutex> lock(future_mutex_);
    if (!future_) {
      const c10::intrusive_ptr<c10::ivalue::Future> source = inner_->getFuture();
      future_ = future_mapped(source, source->elementType(), flagos_->devices(),
                              [flagos = flagos_](const c10::IValue& v) { return flagos->to_flagos(v); });
    }
    return future_;
  }

 private:
  c10::intrusive_ptr<c10d::Work> inner_;
  std::shared_ptr<const FlagosOf> flagos_;
  std::mutex future_mutex_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

bool is_process_group(const c10::Argument& arg) {
  const auto* cls = arg.type()->castRaw<c10::ClassType>();
  return cls != nullptr && cls->name().has_value() && cls->name()->qualifiedName() == "__torch__.torch.classes.c10d.ProcessGroup";
}

// The group must have a backend for the backing device's tensors: a group
// made for other devices only ("cpu:gloo" on a CUDA backing) would otherwise
// fail with an error about CUDA tensors the caller never had.
void check_group(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t first) {
  const auto& args = op.schema().arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    if (!is_process_group(args[i])) {
      continue;
    }
    const auto group = stack[first + i].toCustomClass<c10d::ProcessGroup>();
    try {
      group->getBackend(g_backing.type);  // (hasBackendForDeviceType is not in PyTorch 2.11)
    } catch (const c10::Error& e) {
      const std::string memory = c10::DeviceTypeName(g_backing.type, /*lower_case=*/true);
      TORCH_CHECK(false, "flagos: ", op.operator_name().name, " on flagos tensors runs on the process group's backend for ",
                  memory, " tensors (the memory behind flagos), and this group (backend \"", group->getBackendName(),
                  "\") has none. Create the group with the flagos backend (init_process_group() or "
                  "init_process_group(\"flagos\")), or with a backend that serves ",
                  memory, " tensors (", g_backing.host ? "\"gloo\"" : "\"nccl\" or \"gloo\"", "). (", e.msg(), ")");
    }
    return;
  }
}

void collective(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  const RouteFlags& f = g_route_flags;
  if (C10_UNLIKELY(f.log_dispatch)) {
    log_dispatch(op);
  }
  if (f.count) {
    count(op, false);
  }
  const size_t nargs = op.schema().arguments().size();
  const size_t first = stack->size() - nargs;
  check_group(op, *stack, first);
  auto flagos = std::make_shared<FlagosOf>();
  for (size_t i = first; i < stack->size(); ++i) {
    (*stack)[i] = flagos->to_native((*stack)[i]);
  }
  op.redispatchBoxed(g_backing.keyset, stack);
  const size_t nret = op.schema().returns().size();
  for (size_t i = stack->size() - nret; i < stack->size(); ++i) {
    c10::IValue& v = (*stack)[i];
    if (v.isCustomClass() && !flagos->empty()) {
      auto work = v.toCustomClass<c10d::Work>();
      if (work) {
        // As a Work: an IValue knows a custom class by its registered type.
        v = c10::IValue(c10::intrusive_ptr<c10d::Work>(c10::make_intrusive<FlagosWork>(std::move(work), flagos)));
      }
    } else {
      v = flagos->to_flagos(v);
    }
  }
}

}  // namespace

KernelList collective_kernels() {
  KernelList kernels;
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name.rfind("c10d::", 0) != 0) {
      continue;
    }
    const auto op = c10::Dispatcher::singleton().findOp(name);
    if (op && op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) {
      std::string qualified = name.name.substr(6);
      if (!name.overload_name.empty()) {
        qualified += "." + name.overload_name;
      }
      kernels.push_back({std::move(qualified), torch::CppFunction::makeFromBoxedFunction<&collective>()});
    }
  }
  return kernels;
}

#else

KernelList collective_kernels() { return {}; }

#endif  // TORCH_FL_HAS_C10D

}  // namespace route
}  // namespace torch_fl
