// The autograd engine's device threads at interpreter exit.
//
// A backward on flagos runs on the engine's device thread for its device
// index. When the backward is done, that thread may be the last to let go of
// the finished graph task, which holds Python objects (the thread-local
// state it captured: torch.autograd's stashed contextvars context, any mode
// or saved-tensor hooks). Dropping one takes the GIL; if the interpreter
// begins finalizing while the thread waits for it, CPython ends the thread
// with pthread_exit, whose unwinding through a C++ destructor calls
// std::terminate ("terminate called without an active exception"). PyTorch
// only stops these threads from a static destructor, after finalization.
#pragma once

#include <cstddef>

namespace torch_fl {
namespace runtime {

// Waits until each used device's autograd thread has finished the task it
// was running (the task and its graph released), or `timeout_s` passed: it
// runs an empty marker graph, made without Python, on each (the threads run
// tasks one at a time). Call it without the GIL while the interpreter is
// still whole (an atexit handler): a thread's last release may need the GIL.
// Returns how many threads did not get there in time (0: none). Starts no
// device thread when no backward has run on a device.
size_t drain_autograd_device_threads(double timeout_s);

}  // namespace runtime
}  // namespace torch_fl
