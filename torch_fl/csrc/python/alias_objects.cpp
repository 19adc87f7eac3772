// The Python side of the alias pool (python/alias_objects.h). All of it runs
// with the GIL held: the Python routes borrow, release and adopt with it.
#include "python/alias_objects.h"

#include "tensor/python_object_hooks.h"

#include <Python.h>

#include <c10/core/TensorImpl.h>

namespace torch_fl {
namespace python {

namespace {

// The Python object's only reference is the one its tensor holds. Read
// directly: PyTorch's has_unique_reference() would take the GIL again.
bool sole_reference(void* pyobj) {
  return Py_REFCNT(static_cast<PyObject*>(pyobj)) == 1;
}

// A pooled alias's Python object, if it has one.
PyObject* python_object_of(c10::TensorImpl* alias) {
  return alias->pyobj_slot()->load_pyobj();
}

bool park(c10::TensorImpl* alias) {
  PyObject* obj = python_object_of(alias);
  if (obj == nullptr) {
    return true;  // only the pool holds it
  }
  // A weak reference could hand it to Python while it waits. (The offset is
  // negative for objects whose weak references CPython keeps before the
  // object, 3.12+; zero for types without weak references.)
  const Py_ssize_t offset = Py_TYPE(obj)->tp_weaklistoffset;
  if (offset != 0 && *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(obj) + offset) != nullptr) {
    return false;
  }
  if (PyObject_GC_IsTracked(obj)) {
    PyObject_GC_UnTrack(obj);
  }
  return true;
}

void unpark(c10::TensorImpl* alias) {
  PyObject* obj = python_object_of(alias);
  if (obj != nullptr && !PyObject_GC_IsTracked(obj)) {
    PyObject_GC_Track(obj);
  }
}

}  // namespace

void install_python_object_hooks() {
  tensor::g_python_object_hooks = {&sole_reference, &park, &unpark};
}

}  // namespace python
}  // namespace torch_fl
