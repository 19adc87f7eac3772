// The host backing's dtype gaps (route/dtype_gaps.h).
//
// Flagos over host memory stands in for an accelerator: code that runs there
// should run on a GPU and the other way round. Where CUDA's kernel accepts a
// dtype that the CPU's does not (PyTorch's OpInfo database lists them:
// OpInfo.supported_dtypes("cuda") - supported_dtypes("cpu")), the host
// backing runs the CPU kernel in a wider dtype, only where that computes
// exactly what CUDA's kernel returns, and casts the result to CUDA's dtype.
// docs/architecture.md lists the gaps and which are covered.
//
// Each entry is registered once, at init, for its own overloads: no other
// operator pays for the table, and a covered operator pays one dtype test.
#include "route/dtype_gaps.h"

#include "route/native_route.h"
#include "runtime/device.h"

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/stack.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/histc.h>
#include <ATen/ops/trace.h>

#include <cstdint>
#include <iterator>
#include <utility>

namespace torch_fl {
namespace route {

namespace {

constexpr uint64_t bit(c10::ScalarType t) {
  return uint64_t{1} << static_cast<int>(t);
}

// Signed integers only: CUDA converts a uint8 histc's bounds in a way the
// rules below do not reproduce (bounds below 0 and above 255 disagreed on
// the H200), so uint8 stays a gap (docs/architecture.md).
constexpr uint64_t kIntegers =
    bit(c10::ScalarType::Char) | bit(c10::ScalarType::Short) | bit(c10::ScalarType::Int) | bit(c10::ScalarType::Long);

// histc on integers. CUDA's kernel (_histc_cuda) converts min and max to
// int64 (truncating) and then to the input dtype (wrapping), takes the
// input's own min and max when they are equal, widens an empty range by one
// each side (in the input dtype), and bins v by the integer formula
// (v - min) * bins / (max - min), the last bin closed; the counts are in the
// input dtype. The CPU's float64 histc uses the same formula in float64 with
// the bounds given here: v - min and its product with bins are exact below
// 2^53, and the quotient's truncation equals the integer division's while
// bins * (max - min) <= 2^53 (a quotient that is not an integer k is at least
// 1 / (max - min) below k + 1 <= bins, more than its rounding error). Values
// outside the range stay outside: rounding to float64 is monotone and the
// bounds are exact. Counts (at most numel) are exact; they wrap to the input
// dtype through int64, as CUDA's integer adds do.
at::Tensor histc_widened(const torch::jit::Stack& stack, size_t first) {
  const at::Tensor& self = stack[first].toTensor();
  const int64_t bins = stack[first + 1].toInt();
  const c10::Scalar min = stack[first + 2].toScalar();
  const c10::Scalar max = stack[first + 3].toScalar();
  TORCH_CHECK(bins > 0, "bins must be > 0");
  int64_t lo = 0;
  int64_t hi = 0;
  AT_DISPATCH_INTEGRAL_TYPES(self.scalar_type(), "histc", [&] {
    const auto min_b = min.to<int64_t>();
    const auto max_b = max.to<int64_t>();
    auto minvalue = static_cast<scalar_t>(min_b);
    auto maxvalue = static_cast<scalar_t>(max_b);
    if (min_b == max_b && self.numel() > 0) {
      minvalue = self.min().item<scalar_t>();
      maxvalue = self.max().item<scalar_t>();
    }
    if (minvalue == maxvalue) {
      minvalue = static_cast<scalar_t>(minvalue - 1);
      maxvalue = static_cast<scalar_t>(maxvalue + 1);
    }
    lo = static_cast<int64_t>(minvalue);
    hi = static_cast<int64_t>(maxvalue);
  });
  TORCH_CHECK(lo < hi, "max must be larger than min");
  constexpr int64_t kExact = int64_t{1} << 52;
  TORCH_CHECK_NOT_IMPLEMENTED(-kExact <= lo && hi <= kExact && hi - lo <= (int64_t{1} << 53) / bins,
                              "flagos: histc on ", self.scalar_type(),
                              " runs on host backing as the CPU's float64 histc (the CPU has no integer histc), "
                              "exact only for min and max within +-2^52 and bins * (max - min) <= 2^53; got bins=",
                              bins, ", min=", lo, ", max=", hi,
                              ". Narrow the range, or convert the input to float64 and the counts back.");
  const at::Tensor counts = at::histc(self.to(at::kDouble), bins, lo, hi);
  return counts.to(at::kLong).to(self.scalar_type());
}

// trace on bool. CUDA's kernel sums the diagonal (an int64 count of true);
// the CPU's trace of uint8 sums the same 0/1 values into int64, exactly.
at::Tensor trace_widened(const torch::jit::Stack& stack, size_t first) {
  return at::trace(stack[first].toTensor().to(at::kByte));
}

struct Gap {
  const char* op;        // aten::<op>
  const char* overload;  // its overload name ("" for none)
  bool out;              // an out= overload: the result is copied to `out`, its last argument
  uint64_t narrow;       // the dtypes of `self` that CUDA accepts and the CPU does not
  c10::ScalarType wide;  // the dtype the CPU kernel runs in
  at::Tensor (*widened)(const torch::jit::Stack&, size_t first);  // the result in CUDA's dtype
};

constexpr Gap kGaps[] = {
    {"histc", "", false, kIntegers, c10::ScalarType::Double, &histc_widened},
    {"histc", "out", true, kIntegers, c10::ScalarType::Double, &histc_widened},
    {"trace", "", false, bit(c10::ScalarType::Bool), c10::ScalarType::Byte, &trace_widened},
    {"trace", "out", true, bit(c10::ScalarType::Bool), c10::ScalarType::Byte, &trace_widened},
};

void run_widened(const Gap& gap, size_t num_args, torch::jit::Stack* stack) {
  const size_t first = stack->size() - num_args;
  at::Tensor result = gap.widened(*stack, first);
  if (gap.out) {
    // As CUDA's histc_out and trace's generated out= kernel do.
    at::Tensor out = stack->back().toTensor();
    at::native::resize_output(out, result.sizes());
    out.copy_(result);
    result = std::move(out);
  }
  torch::jit::drop(*stack, num_args);
  torch::jit::push(*stack, std::move(result));
}

template <size_t I>
void widened_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  constexpr const Gap& gap = kGaps[I];
  const size_t num_args = op.schema().arguments().size();
  const c10::IValue& self = (*stack)[stack->size() - num_args];
  if (C10_LIKELY((gap.narrow & bit(self.toTensor().scalar_type())) == 0)) {
    run_native_route(op, ks, stack);
    return;
  }
  run_widened(gap, num_args, stack);
}

std::vector<std::string>& registered() {
  static auto* list = new std::vector<std::string>;  // leaked: read until exit
  return *list;
}

std::string qualified(const Gap& gap) {
  return std::string(gap.op) + (*gap.overload ? std::string(".") + gap.overload : std::string());
}

std::string describe(const Gap& gap) {
  std::string s = qualified(gap) + ":";
  const char* sep = " ";
  for (int t = 0; t < static_cast<int>(c10::ScalarType::NumOptions); ++t) {
    if (gap.narrow & (uint64_t{1} << t)) {
      s += sep;
      s += c10::toString(static_cast<c10::ScalarType>(t));
      sep = ", ";
    }
  }
  return s + " -> " + c10::toString(gap.wide);
}

template <size_t... I>
void gap_kernels(KernelList* out, std::index_sequence<I...>) {
  (out->push_back({qualified(kGaps[I]), torch::CppFunction::makeFromBoxedFunction<&widened_kernel<I>>()}), ...);
  (registered().push_back(describe(kGaps[I])), ...);
}

}  // namespace

KernelList dtype_gap_kernels() {
  KernelList out;
  if (runtime::g_backing.host) {
    gap_kernels(&out, std::make_index_sequence<std::size(kGaps)>());
  }
  return out;
}

std::vector<std::string> registered_dtype_gaps() {
  return registered();
}

}  // namespace route
}  // namespace torch_fl
