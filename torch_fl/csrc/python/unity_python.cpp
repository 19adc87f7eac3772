// The build unit of python/: every file of the folder (csrc/README.md, Build
// units).
#include "python/alias_objects.cpp"
#include "python/graph_boundary.cpp"
#include "python/replay_plan.cpp"
#include "python/python_args.cpp"
#include "python/py_route.cpp"
#include "python/typed_fronts.cpp"
#include "python/work_future.cpp"
#include "python/module.cpp"
