// A recorded call and its replay (replay/program.h).
#include "replay/program.h"

#include "tensor/ivalue_tensors.h"

#include <cstring>

namespace torch_fl {
namespace replay {

namespace {

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

void input_tensors(const torch::jit::Stack& stack, size_t nargs, c10::SmallVector<at::Tensor, 8>* out) {
  for (size_t i = stack.size() - nargs; i < stack.size(); ++i) {
    tensor::for_each_tensor(stack[i], [&](const at::Tensor& t, tensor::TensorIn) {
      if (t.defined() && !t.unsafeGetTensorImpl()->is_wrapped_number()) {
        out->push_back(t);
      }
    });
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

}  // namespace replay
}  // namespace torch_fl
