// The Python layer as one translation unit: every file of python/ (see
// csrc/unity_route.cpp and csrc/unity_core.cpp for why units are few).
#include "python/alias_objects.cpp"
#include "python/replay_plan.cpp"
#include "python/python_args.cpp"
#include "python/py_route.cpp"
#include "python/typed_fronts.cpp"
#include "python/work_future.cpp"
#include "python/module.cpp"
