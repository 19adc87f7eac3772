// What the alias pool needs from Python, without including Python: the
// Python layer (python/alias_objects.cpp) fills these hooks at module init.
//
// A Python route's pool keeps the Python object a kernel saw with each alias,
// and decides with the GIL held whether an alias or a result is held by
// nothing else (a reference count) and whether its object can wait off the
// garbage collector's lists (park) until the next borrow (unpark). The native
// route never calls them: its pool's aliases have no Python objects.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/TensorImpl.h>

namespace torch_fl {
namespace tensor {

struct PythonObjectHooks {
  // The Python object (a PyObject*) has no reference but its tensor's. GIL held.
  bool (*sole_reference)(void* pyobj);
  // Takes an alias's Python object, if any, off the garbage collector's lists,
  // so that nothing in Python can reach it while it waits in the pool and it
  // may keep its geometry and its (stale) pointer; false when that cannot be
  // promised (a weak reference to the object exists): the caller empties the
  // alias instead. GIL held.
  bool (*park)(c10::TensorImpl* alias);
  // Puts the object back on the collector's lists when the alias is borrowed
  // again, before any Python code sees it. GIL held.
  void (*unpark)(c10::TensorImpl* alias);
};

// Without Python (the hooks not installed): PyTorch's own reference check,
// and no parking (an alias with a Python object is emptied).
extern PythonObjectHooks g_python_object_hooks;

// sole_holder() for a caller that holds the GIL (a Python route's borrows and
// results): the reference count read directly, where PyTorch's
// has_unique_reference() would take the GIL again through pybind11.
inline bool sole_holder_with_gil(const at::Tensor& t) {
  const size_t n = t.use_count();
  if (C10_LIKELY(n == 1)) {
    return true;
  }
  void* obj = t.unsafeGetTensorImpl()->pyobj_slot()->load_pyobj();
  return n == 2 && obj != nullptr && g_python_object_hooks.sole_reference(obj);
}

}  // namespace tensor
}  // namespace torch_fl
