// The build unit of tensor/: every file of the folder (csrc/README.md, Build
// units). The alias pool the per-call path uses is header-only
// (tensor/alias_pool.h) and inlined there; alias_pool.cpp holds only the
// thread's pools and the Python hooks' defaults.
#include "tensor/alias.cpp"
#include "tensor/alias_pool.cpp"
#include "tensor/unsupported_layouts.cpp"
