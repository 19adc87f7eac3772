// A collective's future that completes with the caller's flagos tensors when gloo's or NCCL's own
// future completes, or with its error. gloo and NCCL hand their future the native aliases of the
// tensors; DDP's reducer and every other consumer need the flagos tensors themselves. Chained here in
// C++, the completion runs on the engine's thread without the GIL: a Python callback there waited for
// the GIL on every collective (DDP: every bucket of every step).
//
// On a CUDA backing the future is one of the flagos devices, and markCompleted records its events on the
// current streams of the callback, which c10's Future set to streams that waited on the inner future's
// (NCCL's) events; flagos streams are CUDA streams, so a consumer of this future sees NCCL's results.
// The chaining itself is route::future_completed_with (route/collectives.cpp), shared with the c10d:: kernels.
#include "python/work_future.h"

#include "route/collectives.h"

#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <utility>
#include <vector>

namespace torch_fl {
namespace python {

namespace py = pybind11;

namespace {

py::object completed_with(const py::object& inner, std::vector<at::Tensor> value, std::vector<c10::Device> devices) {
  c10::intrusive_ptr<c10::ivalue::Future> source =
      torch::jit::toIValue(inner, c10::FutureType::create(c10::AnyType::get())).toFuture();
  c10::intrusive_ptr<c10::ivalue::Future> mapped;
  {
    py::gil_scoped_release no_gil;  // a completed source runs the callback now, which takes no GIL
    mapped = route::future_completed_with(source, c10::IValue(std::move(value)), std::move(devices));
  }
  return torch::jit::toPyObject(c10::IValue(mapped));
}

}  // namespace

void bind_work_future(py::module& m) {
  m.def("_future_completed_with", &completed_with, py::arg("inner"), py::arg("value"), py::arg("devices"),
        "A torch.futures.Future on `devices` that completes with `value` when `inner` completes, or with its "
        "error; chained in C++ (the completion takes no GIL).");
}

}  // namespace python
}  // namespace torch_fl
