// The autograd device threads drained at exit (runtime/autograd_threads.h).
#include "runtime/autograd_threads.h"

#include "runtime/device.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace torch_fl {
namespace runtime {

namespace {

using torch::autograd::Engine;
using torch::autograd::ReadyQueue;

// The engine's per-device queues (protected; set once, when the engine
// starts its device threads): read through a member pointer named from a
// derived class, which C++ allows without copying the engine's layout.
struct EngineQueues : Engine {
  static const std::vector<std::shared_ptr<ReadyQueue>>& of(Engine& engine) {
    return engine.*(&EngineQueues::device_ready_queues_);
  }
};

// The root of a graph that does nothing: run on device i's thread, which
// takes it only after the task it was running has returned and been
// released. Made in C++ with an empty tensor, it holds nothing of Python's.
struct ExitMarker final : torch::autograd::Node {
  torch::autograd::variable_list apply(torch::autograd::variable_list&&) override {
    return {};
  }
  std::string name() const override {
    return "torch_fl::ExitMarker";
  }
};

// A new node as the installed torch holds graph nodes: std::shared_ptr up to
// torch 2.11, c10::intrusive_ptr later (Edge::function's type says which).
template <class Ptr>
struct NewNode;
template <class T>
struct NewNode<std::shared_ptr<T>> {
  template <class N>
  static std::shared_ptr<T> make() {
    return std::make_shared<N>();
  }
};
template <class T>
struct NewNode<c10::intrusive_ptr<T>> {
  template <class N>
  static c10::intrusive_ptr<T> make() {
    return c10::make_intrusive<N>();
  }
};
using NodePtr = decltype(torch::autograd::Edge::function);

// Runs a marker graph on device `index`'s autograd thread and returns once
// that thread has run it (the engine's own wait, on this thread).
void run_marker(c10::DeviceIndex index) {
  at::Tensor grad = at::empty({0}, at::TensorOptions().device(kFlagos, index));  // no memory
  NodePtr marker = NewNode<NodePtr>::make<ExitMarker>();
  marker->add_input_metadata(grad);
  Engine::get_default_engine().execute({torch::autograd::Edge(marker, 0)}, {grad}, /*keep_graph=*/false,
                                       /*create_graph=*/false, /*accumulate_grad=*/true);
}

}  // namespace

size_t drain_autograd_device_threads(double timeout_s) {
  const auto& queues = EngineQueues::of(Engine::get_default_engine());
  if (queues.empty()) {
    return 0;  // no backward has run on a device: no thread to wait for (and none to start)
  }
  // Only devices that were used (on a GPU, a device without a context ran
  // nothing, and a marker must not create one).
  const auto& hooks = at::globalContext().getAcceleratorHooksInterface(kFlagos);
  std::vector<c10::DeviceIndex> used;
  for (c10::DeviceIndex i = 0; i < g_backing.count && static_cast<size_t>(i) < queues.size(); ++i) {
    if (hooks.hasPrimaryContext(i)) {
      used.push_back(i);
    }
  }
  // Each marker on a thread of its own: a device thread still busy (a
  // backward on another thread at exit) must not keep the others waiting,
  // and the wait must end at the timeout. A marker that outlives the wait
  // runs later, harmlessly.
  struct Countdown {
    std::mutex mutex;
    std::condition_variable done;
    size_t left = 0;
  };
  auto countdown = std::make_shared<Countdown>();
  countdown->left = used.size();
  for (c10::DeviceIndex i : used) {
    std::thread([countdown, i] {
      try {
        run_marker(i);
      } catch (const std::exception&) {
        // the thread then did not answer: counted as busy below
        return;
      }
      std::lock_guard<std::mutex> lock(countdown->mutex);
      --countdown->left;
      countdown->done.notify_all();
    }).detach();
  }
  std::unique_lock<std::mutex> lock(countdown->mutex);
  countdown->done.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return countdown->left == 0; });
  return countdown->left;
}

}  // namespace runtime
}  // namespace torch_fl
