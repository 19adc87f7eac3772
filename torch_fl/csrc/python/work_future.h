// The future of a flagos collective's Work (torch_fl/distributed/work.py).
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace torch_fl {
namespace python {

// Binds _future_completed_with(inner, value, devices).
void bind_work_future(pybind11::module& m);

}  // namespace python
}  // namespace torch_fl
