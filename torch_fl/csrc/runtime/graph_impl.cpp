// torch.accelerator.Graph on flagos (runtime/graph_impl.h).
//
// A flagos graph is a CUDA graph of the backing device: torch.flagos.CUDAGraph
// (torch_fl/flagos/graphs.py) captures flagos work with torch.cuda's
// machinery, since flagos streams are CUDA streams and flagos memory comes
// from the CUDA caching allocator. The core builds without CUDA headers, so
// it cannot hold an at::cuda::CUDAGraph itself: each method here calls the
// operator torch_fl::_graph, which torch_fl/flagos/graphs.py implements in
// Python over a table of torch.flagos.CUDAGraph objects. The dispatcher is
// the bridge, so nothing here includes Python.
#include "runtime/graph_impl.h"

#include "runtime/device.h"

#if __has_include(<ATen/core/GraphImplInterface.h>)
#include <ATen/core/GraphImplInterface.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <string>
#include <vector>

namespace torch_fl {
namespace runtime {

namespace {

// torch_fl::_graph(str method, int handle, int[] args, str text) -> int[]
std::vector<int64_t> call_graph_op(const char* method, int64_t handle, std::vector<int64_t> args,
                                   const std::string& text = "") {
  const auto op = c10::Dispatcher::singleton().findSchema({"torch_fl::_graph", ""});
  TORCH_CHECK(op.has_value(),
              "torch.accelerator.Graph on flagos needs torch_fl.flagos.graphs, which defines the operator "
              "torch_fl::_graph; it is imported by `import torch_fl`");
  torch::jit::Stack stack{c10::IValue(std::string(method)), c10::IValue(handle), c10::IValue(std::move(args)),
                          c10::IValue(text)};
  op->callBoxed(&stack);
  return stack.at(0).toIntVector();
}

class FlagosGraph final : public at::GraphImplInterface {
 public:
  explicit FlagosGraph(const at::GraphImplArgs& args) {
    TORCH_CHECK(!g_backing.host,
                "torch.accelerator.Graph on flagos needs a CUDA backing: a graph captures CUDA work, and flagos is "
                "backed by host memory in this process (no usable GPU, or FLAGOS_ACCELERATOR=cpu)");
    handle_ = call_graph_op("new", 0, {args.keep_graph ? 1 : 0}).at(0);
  }

  ~FlagosGraph() override {
    try {
      call_graph_op("delete", handle_, {});
    } catch (const std::exception& e) {
      TORCH_WARN("torch.accelerator.Graph on flagos: releasing graph ", handle_, " failed: ", e.what());
    }
  }

  void capture_begin(c10::MempoolId_t pool, at::GraphCaptureMode mode) override {
    call_graph_op("capture_begin", handle_,
                  {static_cast<int64_t>(pool.first), static_cast<int64_t>(pool.second), static_cast<int64_t>(mode)});
  }
  void capture_end() override {
    call_graph_op("capture_end", handle_, {});
  }
  void instantiate() override {
    call_graph_op("instantiate", handle_, {});
  }
  void replay() override {
    call_graph_op("replay", handle_, {});
  }
  void reset() override {
    call_graph_op("reset", handle_, {});
  }
  c10::MempoolId_t pool() const override {
    const std::vector<int64_t> id = call_graph_op("pool", handle_, {});
    return {static_cast<c10::CaptureId_t>(id.at(0)), static_cast<c10::CaptureId_t>(id.at(1))};
  }
  void enable_debug_mode() override {
    call_graph_op("enable_debug_mode", handle_, {});
  }
  void debug_dump(const std::string& path) override {
    call_graph_op("debug_dump", handle_, {}, path);
  }

 private:
  int64_t handle_ = 0;
};

}  // namespace

void register_graph_impl() {
  // The key is the backend's name as c10::DeviceTypeName gives it ("flagos").
  const std::string key = c10::DeviceTypeName(kFlagos, /*lower_case=*/false);
  if (at::GraphImplRegistry()->Has(key)) {
    return;
  }
  at::GraphImplRegistry()->Register(
      key, [](at::GraphImplArgs args) -> std::unique_ptr<at::GraphImplInterface> {
        return std::make_unique<FlagosGraph>(args);
      });
}

}  // namespace runtime
}  // namespace torch_fl

#else

namespace torch_fl {
namespace runtime {

void register_graph_impl() {}

}  // namespace runtime
}  // namespace torch_fl

#endif
