// A recorded backend call (a Program) and its replay (replay/README.md).
//
// FlagGems' Python function for an operator spends its time on the host
// (shapes, strides, grids, allocation), and for one input signature
// (replay/signature.h) it does the same thing on every call. The recorder
// (torch_fl/replay/recorder.py) records one call: the ATen operators it ran
// (allocations, copies) and the Triton kernels it launched, with every tensor
// it touched expressed as a slot (an input of the call, or a result of a
// recorded operator, or a view of one). A Program is that recording; run()
// plays it again with the new call's tensors, launching the same compiled
// kernels through the driver (runtime/cuda_driver.h) with the new pointers,
// and no Python.
#pragma once

#include "runtime/cuda_driver.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace torch_fl {
namespace replay {

// One argument of a recorded operator: a constant, a slot, or a list of slots.
struct ArgTemplate {
  enum class Kind : uint8_t { kConstant, kSlot, kTensorList, kOptionalTensorList };
  Kind kind = Kind::kConstant;
  c10::IValue constant;
  int32_t slot = -1;
  std::vector<int32_t> slots;  // lists; -1 for a None element of an optional list
};

// A recorded ATen operator (an allocation, a copy, a fill), run again through
// the dispatcher on the backing device's tensors.
struct OpStep {
  c10::OperatorHandle op;
  std::vector<ArgTemplate> args;
  // Per return: the slot(s) its tensor(s) fill; -1 for a return that is an
  // argument (in-place, out=) or not a tensor.
  std::vector<std::vector<int32_t>> outs;
  explicit OpStep(c10::OperatorHandle h) : op(std::move(h)) {}
};

// A recorded kernel launch: the argument bytes as recorded, with each pointer
// argument recomputed from its slot (the slot's data pointer plus the
// recorded offset).
struct LaunchStep {
  runtime::cuda_driver::Launch launch;
  std::vector<uint8_t> bytes;          // 8 bytes per parameter, little-endian values
  std::vector<uint32_t> ptr_params;    // parameters that are pointers
  std::vector<int32_t> ptr_slots;      // their slots (roots: inputs or operator results)
  std::vector<int64_t> ptr_offsets;    // their byte offsets from the slot's data pointer
  std::string name;                    // the kernel's, for errors
};

// A slot that views another slot's storage with its own metadata.
struct ViewSlot {
  int32_t root = -1;  // a root slot (an input or an operator's result)
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t storage_offset = 0;
};

// What a return of the operator is.
struct ResultTemplate {
  enum class Kind : uint8_t { kTensor, kNone, kTensorList };
  Kind kind = Kind::kTensor;
  std::vector<int32_t> slots;  // one for kTensor
};

struct Step {
  bool is_launch = false;
  size_t index = 0;  // into Program::ops or Program::launches
};

struct Program {
  int32_t inputs = 0;  // slots 0..inputs-1: the call's tensors, in input_tensors() order
  int32_t slots = 0;
  std::vector<std::optional<ViewSlot>> views;  // per slot
  std::vector<OpStep> ops;
  std::vector<LaunchStep> launches;
  std::vector<Step> steps;
  std::vector<ResultTemplate> results;  // per return of the operator
};

// Runs `p` for the call whose `nargs` arguments (native aliases, unwrapped)
// are on top of `stack`: pops them and pushes the results, as a kernel does.
// `index`: the call's device (launches go to its current stream).
void run(const Program& p, torch::jit::Stack* stack, size_t nargs, c10::DeviceIndex index);

// The slot order of a call's tensors (replay/README.md), as run() and the
// recorder (torch_fl/replay/recorder.py, input_tensors) enumerate them: the
// arguments in schema order, and in each every defined tensor that is not a
// wrapped number (a Tensor, a Tensor?, the elements of a Tensor[] or a
// Tensor?[] in order, None elements skipped).
void input_tensors(const torch::jit::Stack& stack, size_t nargs, c10::SmallVector<at::Tensor, 8>* out);

}  // namespace replay
}  // namespace torch_fl
