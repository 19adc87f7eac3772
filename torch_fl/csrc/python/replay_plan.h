// Record and replay in a PyRoute (route `flaggems`; csrc/replay/README.md).
//
// A call whose dtype's target is a replayed kernel is keyed by its signature
// (replay/signature.h). A signature seen before replays its recorded Program
// in C++, without the GIL (try_replay). A new one runs the backend's Python
// function once under the recorder (torch_fl/replay/recorder.py), which
// returns the call's result and a recording of what it did: a program to
// store, a reason the signature must stay on the Python function (it reads
// tensor values, launches on another stream, ...), or nothing (it was
// autotuning: record the next call again).
#pragma once

#include "replay/cache.h"
#include "replay/program.h"
#include "replay/signature.h"

#include <torch/csrc/utils/pybind.h>

#include <ATen/core/dispatch/Dispatcher.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace torch_fl {
namespace python {

struct ReplayPlan {
  // Read without the GIL on every call of the operator.
  std::atomic<bool> any{false};  // some dtype's target is replayed
  std::array<std::atomic<bool>, static_cast<size_t>(c10::ScalarType::NumOptions) + 1> on_dtype{};  // last: no tensor
  std::atomic<int64_t*> calls{nullptr};  // the backend's call counter (an array('q') buffer the routing layer keeps)
  std::string line;                      // the dispatch-log line; written with the GIL while `any` is false
  std::string label = "flaggems";
  replay::Cache cache;

  std::atomic<int64_t> hits{0};      // calls replayed
  std::atomic<int64_t> recorded{0};  // calls recorded (their Python function ran)
  std::atomic<int64_t> python{0};    // calls left on the Python function (a signature that cannot be replayed)
  std::atomic<int64_t> evicted{0};   // signatures dropped from the full cache
  // With the GIL: why signatures stay on the Python function, and how many calls each reason cost.
  std::vector<std::string> reasons;
  std::vector<int64_t> reason_calls;
  int32_t unkeyed_reason = -1;  // index of the reason for calls that cannot be keyed, once one came
  py::object counters;  // keeps `calls`' buffer alive
  py::object fn;        // the function the cached programs were recorded from

  bool on(c10::ScalarType dtype) const {
    const size_t i = dtype == c10::ScalarType::Undefined ? on_dtype.size() - 1 : static_cast<size_t>(dtype);
    return on_dtype[i].load(std::memory_order_relaxed);
  }
  int32_t reason_index(const std::string& reason);
};

// Replays a known signature; false when the Python side must run the call
// (another target, an empty input, a new or unreplayable signature). No GIL.
bool try_replay(ReplayPlan& f, const c10::OperatorHandle& op, torch::jit::Stack* stack);

// The Python side of a replayed target's call (GIL held): `sig` was keyed before
// the arguments were unwrapped (`keyed` false: the call cannot be keyed).
// Runs `fn` under the recorder for a new signature and stores what it
// recorded, or runs `fn` plainly. Returns fn's result.
py::object call_replay_target(ReplayPlan& f, const c10::OperatorHandle& op, const py::object& fn,
                              const replay::Signature& sig, bool keyed, const py::tuple& args,
                              const py::dict& kwargs);

// The recorder: torch_fl._C._set_replay_recorder(recorder), called as
// recorder(fn, args, kwargs, returns) -> (result, recording), `returns` the
// operator's return types ("Tensor", "Tensor[]", "Tensor?").
void set_replay_recorder(py::object recorder);

// A Python recording (the format of replay/README.md) as a Program (GIL
// held); raises ValueError naming what cannot be replayed.
std::shared_ptr<const replay::Program> build_program(const c10::OperatorHandle& op, const py::handle& spec);

// The tensors of a call of `op` ("add.Tensor") with these arguments in slot
// order, as replay::input_tensors gives them (torch_fl._C._replay_input_tensors:
// tests compare the recorder's order with it).
std::vector<at::Tensor> input_tensors_of(const std::string& op, const py::tuple& args, const py::dict& kwargs);

// {"hits", "recorded", "python", "evicted", "signatures", "programs", "capacity", "reasons": {reason: calls}}.
py::dict replay_stats(ReplayPlan& f);

}  // namespace python
}  // namespace torch_fl
