// The native route's per-operator counts and its dispatch log.
#include "route/counters.h"
#include "route/profiling.h"

#include <iostream>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace torch_fl {
namespace route {

RouteFlags g_route_flags;

namespace {

std::mutex stats_mutex;
// Keyed by the schema's address: stable for the operator's lifetime. Entries
// are never erased (reset zeroes them), so cached pointers stay valid.
std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpCounts>> stats;

OpCounts* counts_slow(const c10::FunctionSchema* key) {
  std::lock_guard<std::mutex> lock(stats_mutex);
  auto& slot = stats[key];
  if (!slot) {
    slot = std::make_unique<OpCounts>();
  }
  return slot.get();
}

// A small per-thread direct-mapped cache in front of the map: the hot path
// is a pointer compare and a relaxed atomic add.
struct CountCache {
  const c10::FunctionSchema* key[64] = {};
  OpCounts* counts[64] = {};
};
thread_local CountCache count_cache;

// Labels printed by the dispatch log; read only when logging is on.
std::mutex label_mutex;
std::string default_label = "native";

}  // namespace

OpCounts* op_counts(const c10::OperatorHandle& op) {
  return counts_slow(&op.schema());
}

void count(const c10::OperatorHandle& op, bool fallback) {
  const c10::FunctionSchema* key = &op.schema();
  const size_t slot = (reinterpret_cast<uintptr_t>(key) >> 4) & 63;
  if (C10_UNLIKELY(count_cache.key[slot] != key)) {
    count_cache.key[slot] = key;
    count_cache.counts[slot] = counts_slow(key);
  }
  (fallback ? count_cache.counts[slot]->cpu_fallback : count_cache.counts[slot]->native)
      .fetch_add(1, std::memory_order_relaxed);
}

std::string overload_name(const c10::OperatorName& name) {
  std::string s = name.name;
  if (s.rfind("aten::", 0) == 0) {
    s = s.substr(6);
  }
  if (!name.overload_name.empty()) {
    s += "." + name.overload_name;
  }
  return s;
}

std::string native_label() {
  std::lock_guard<std::mutex> lock(label_mutex);
  return default_label;
}

void log_dispatch(const c10::OperatorHandle& op) {
  std::cerr << "[flagos dispatch] " << overload_name(op.operator_name()) << " -> " << native_label() << std::endl;
}

void log_fallback(const c10::OperatorHandle& op) {
  std::cerr << "[flagos cpu_fallback] aten::" << overload_name(op.operator_name()) << std::endl;
}

void set_default_native_label(const std::string& label) {
  std::lock_guard<std::mutex> lock(label_mutex);
  default_label = label;
}

std::vector<std::tuple<std::string, std::string, int64_t>> route_stats() {
  std::lock_guard<std::mutex> lock(stats_mutex);
  std::vector<std::tuple<std::string, std::string, int64_t>> out;
  for (const auto& [schema, c] : stats) {
    std::string name = overload_name(schema->operator_name());
    if (int64_t n = c->native.load()) {
      out.emplace_back(name, "native", n);
    }
    if (int64_t n = c->cpu_fallback.load()) {
      out.emplace_back(name, "cpu_fallback", n);
    }
  }
  return out;
}

void reset_route_stats() {
  std::lock_guard<std::mutex> lock(stats_mutex);
  for (auto& entry : stats) {
    entry.second->native = 0;
    entry.second->cpu_fallback = 0;
  }
}

}  // namespace route
}  // namespace torch_fl
