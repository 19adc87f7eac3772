// The build unit of autograd/ (csrc/README.md, Build units).
//
// The autograd kernels call only the dispatcher. They are a unit apart from
// route/'s: in the per-call unit their calls of the same
// Dispatcher::redispatch<> instances made GCC stop inlining it into the typed
// native kernels (more instructions per routed call,
// benchmarks/route_instructions.py).
#include "autograd/autograd_shortcut.cpp"
