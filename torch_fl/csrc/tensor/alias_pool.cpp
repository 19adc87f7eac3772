// The calling thread's alias pools, and the Python hooks' defaults.
//
// The per-call path (route/) reads the native route's pool through the inline
// alias_pool() of tensor/alias_pool.h, once per call; only its creation is
// here. The Python routes' pool is reached through python_alias_pool().
#include "tensor/alias_pool.h"

#include "tensor/python_object_hooks.h"

namespace torch_fl {
namespace tensor {

namespace detail {

// Leaked per thread on purpose: tensors must not be destroyed during thread or
// process teardown, when the allocator behind them may already be gone. A
// plain pointer, set on first use: a thread_local with a dynamic initialiser
// would run its guard on every access.
__thread AliasPool* thread_alias_pool = nullptr;

C10_NOINLINE AliasPool* new_thread_alias_pool() {
  return thread_alias_pool = new AliasPool(/*python=*/false);
}

}  // namespace detail

namespace {

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
