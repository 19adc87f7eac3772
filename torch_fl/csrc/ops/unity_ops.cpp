// The build unit of ops/: every file of the folder (csrc/README.md, Build
// units).
#include "ops/core_ops.cpp"
#include "ops/metadata_ops.cpp"
#include "ops/nested.cpp"
#include "ops/autocast.cpp"
#include "ops/sdpa.cpp"
#include "ops/unsupported_layouts.cpp"
#include "ops/register.cpp"
