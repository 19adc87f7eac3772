// The GIL and the interpreter's life, as the Python layer's per-call path
// needs them.
#pragma once

#include <Python.h>

namespace torch_fl {
namespace python {

// Holds the GIL for a scope (re-entrant). On a routed call's path this is a
// fraction of pybind11's gil_scoped_acquire, whose lookups of its internals
// and thread state are several hundred instructions per acquire
// (benchmarks/route_instructions.py), twice per call through a typed front.
class GilHeld {
 public:
  GilHeld() : state_(PyGILState_Ensure()) {}
  ~GilHeld() {
    PyGILState_Release(state_);
  }
  GilHeld(const GilHeld&) = delete;
  GilHeld& operator=(const GilHeld&) = delete;

 private:
  PyGILState_STATE state_;
};

// False once the interpreter is gone or going: then Python objects must be
// dropped without the GIL (taking it would abort the process).
inline bool python_alive() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

}  // namespace python
}  // namespace torch_fl
