// The list behind torch_fl._C._core_ops() (ops/core_ops.h).
#include "ops/core_ops.h"

#include <algorithm>
#include <mutex>

namespace torch_fl {
namespace ops {

namespace {

std::mutex names_mutex;
std::vector<std::string>& names() {
  static auto* list = new std::vector<std::string>;  // leaked: read until exit
  return *list;
}

}  // namespace

void note_core_op(const char* name) {
  std::lock_guard<std::mutex> lock(names_mutex);
  auto& list = names();
  if (std::find(list.begin(), list.end(), name) == list.end()) {
    list.emplace_back(name);
  }
}

std::vector<std::string> core_ops() {
  std::lock_guard<std::mutex> lock(names_mutex);
  return names();
}

}  // namespace ops
}  // namespace torch_fl
