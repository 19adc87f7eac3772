// The calling thread's alias pools, and the Python hooks' defaults.
//
// Compiled in the core's one translation unit (csrc/unity_route.cpp) with the
// per-call path, which reaches the pools through alias_pool() once per call.
#include "tensor/alias_pool.h"

#include "tensor/python_object_hooks.h"

namespace torch_fl {
namespace tensor {

namespace {

// Leaked per thread on purpose: tensors must not be destroyed during thread or
// process teardown, when the allocator behind them may already be gone. A
// plain pointer, set on first use: a thread_local with a dynamic initialiser
// would run its guard on every access.
thread_local AliasPool* thread_alias_pool = nullptr;
thread_local AliasPool* thread_python_alias_pool = nullptr;

C10_NOINLINE AliasPool* new_pool(AliasPool*& slot, bool python) {
  return slot = new AliasPool(python);
}

bool sole_reference_without_python(void*) {
  return false;  // no reference count to read: never taken to be the sole holder
}

bool park_without_python(c10::TensorImpl* alias) {
  return alias->pyobj_slot()->load_pyobj() == nullptr;
}

void unpark_without_python(c10::TensorImpl*) {}

}  // namespace

PythonObjectHooks g_python_object_hooks{&sole_reference_without_python, &park_without_python,
                                        &unpark_without_python};

AliasPool& alias_pool() {
  AliasPool* pool = thread_alias_pool;
  return C10_LIKELY(pool != nullptr) ? *pool : *new_pool(thread_alias_pool, /*python=*/false);
}

AliasPool& python_alias_pool() {
  AliasPool* pool = thread_python_alias_pool;
  return C10_LIKELY(pool != nullptr) ? *pool : *new_pool(thread_python_alias_pool, /*python=*/true);
}

std::tuple<int64_t, int64_t, int64_t> alias_pool_stats(bool python) {
  const AliasPool& pool = python ? python_alias_pool() : alias_pool();
  return {static_cast<int64_t>(pool.borrows()), pool.made(), pool.reshaped()};
}

}  // namespace tensor
}  // namespace torch_fl
