// The build unit of replay/: every file of the folder (csrc/README.md, Build
// units). PyRoute calls into it (python/replay_plan.cpp) once per replayed
// call; nothing of the native route does.
#include "replay/signature.cpp"
#include "replay/program.cpp"
#include "replay/cache.cpp"
