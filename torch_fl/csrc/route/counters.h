// What the native route records per call: each operator's counts (native
// route, CPU fallback), the dispatch log, and the switches that turn them on.
// The per-call part is a flag test and a relaxed atomic add; labels and names
// are read only when logging is on.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace torch_fl {
namespace route {

// Calls of one operator on the native route and the CPU fallback. Never freed
// (reset zeroes them), so a kernel may keep the pointer.
struct OpCounts {
  std::atomic<int64_t> native{0};
  std::atomic<int64_t> cpu_fallback{0};
};
// The counts of `op`, found once (at registration) by kernels that keep them.
OpCounts* op_counts(const c10::OperatorHandle& op);
// Counts one call of `op` through a small per-thread cache of op_counts().
void count(const c10::OperatorHandle& op, bool fallback);

struct RouteFlags {
  bool log_dispatch = false;
  bool log_fallback = false;
  bool strict = false;
  bool count = true;
};
extern RouteFlags g_route_flags;

// One '[flagos dispatch] <overload> -> <label>' line on stderr.
void log_dispatch(const c10::OperatorHandle& op);
// One '[flagos cpu_fallback] aten::<overload>' line on stderr.
void log_fallback(const c10::OperatorHandle& op);

// One call of `op` on the native route: its dispatch-log line (when logging
// is on) and its count, from a kernel that found `counts` at registration.
inline void record_native_call(const c10::OperatorHandle& op, OpCounts* counts) {
  const RouteFlags& f = g_route_flags;
  if (C10_UNLIKELY(f.log_dispatch)) {
    log_dispatch(op);
  }
  if (f.count) {
    counts->native.fetch_add(1, std::memory_order_relaxed);
  }
}

// "add.Tensor" for aten::add.Tensor, "mm" for aten::mm.
std::string overload_name(const c10::OperatorName& name);

// The label the dispatch log prints for the native route ("native" unless set).
void set_default_native_label(const std::string& label);
// (operator, "native" | "cpu_fallback", calls) for every operator called.
std::vector<std::tuple<std::string, std::string, int64_t>> route_stats();
void reset_route_stats();

}  // namespace route
}  // namespace torch_fl
