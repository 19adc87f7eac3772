// flagos generators over backing-device generators (runtime/generator.h).
//
// A flagos generator is a GeneratorImpl tagged flagos:i that delegates every
// call to the generator of the backing device it holds: cuda:i's own default
// generator (so a seeded model on flagos equals one on cuda:i), or on host
// backing a CPUGeneratorImpl of its own per virtual device (the CPU algorithm:
// a seeded model on flagos equals one on the CPU). Its device says flagos, so
// a CPU operator given one raises, as it does for a CUDA generator; the
// native route hands the backing generator to the backing kernel
// (route/routed_args.cpp).
#include "runtime/generator.h"

#include "runtime/device.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/util/Exception.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace torch_fl {
namespace runtime {

namespace {

struct FlagosGeneratorImpl final : c10::GeneratorImpl {
  FlagosGeneratorImpl(c10::DeviceIndex index, at::Generator backing)
      : c10::GeneratorImpl(c10::Device(kFlagos, index), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        backing_(std::move(backing)) {}

  // Callers hold this generator's mutex (Note [Acquire lock when using random
  // generators]); kernels lock the backing generator's, so each call takes it too.
  void set_current_seed(uint64_t seed) override {
    std::lock_guard<std::mutex> lock(backing_.mutex());
    backing_.set_current_seed(seed);
  }
  // The CPU algorithm keeps its whole position in its state, and CPU
  // generators raise for offsets; torch.Generator's pickling asks every
  // non-CPU generator for one, so a host-backed flagos generator reports 0
  // and accepts only 0 back (its state carries the rest).
  void set_offset(uint64_t offset) override {
    if (on_cpu()) {
      TORCH_CHECK(offset == 0, "flagos: a host-backed flagos generator has no offset (its position is in its state: "
                               "get_state/set_state); got offset ", std::to_string(offset));
      return;
    }
    std::lock_guard<std::mutex> lock(backing_.mutex());
    backing_.set_offset(offset);
  }
  uint64_t get_offset() const override {
    if (on_cpu()) {
      return 0;
    }
    std::lock_guard<std::mutex> lock(backing_.mutex());
    return backing_.get_offset();
  }
  uint64_t current_seed() const override {
    std::lock_guard<std::mutex> lock(backing_.mutex());
    return backing_.current_seed();
  }
  uint64_t seed() override {
    std::lock_guard<std::mutex> lock(backing_.mutex());
    return backing_.seed();
  }
  void set_state(const c10::TensorImpl& new_state) override {
    std::lock_guard<std::mutex> lock(backing_.mutex());
    backing_.unsafeGetGeneratorImpl()->set_state(new_state);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    std::lock_guard<std::mutex> lock(backing_.mutex());
    return backing_.unsafeGetGeneratorImpl()->get_state();
  }
  void graphsafe_set_state(const c10::intrusive_ptr<c10::GeneratorImpl>& new_state) override {
    auto* other = dynamic_cast<FlagosGeneratorImpl*>(new_state.get());
    TORCH_CHECK(other != nullptr, "flagos: graphsafe_set_state expects the state of a flagos generator, got one of ",
                new_state->device().str());
    std::lock_guard<std::mutex> lock(backing_.mutex());
    backing_.unsafeGetGeneratorImpl()->graphsafe_set_state(other->backing_.getIntrusivePtr());
  }
  c10::intrusive_ptr<c10::GeneratorImpl> graphsafe_get_state() const override {
    std::lock_guard<std::mutex> lock(backing_.mutex());
    at::Generator state(backing_.unsafeGetGeneratorImpl()->graphsafe_get_state());
    return c10::make_intrusive<FlagosGeneratorImpl>(device_.index(), std::move(state));
  }

  const at::Generator& backing() const {
    return backing_;
  }
  bool on_cpu() const {
    return backing_.device().type() == c10::DeviceType::CPU;
  }

 private:
  FlagosGeneratorImpl* clone_impl() const override {
    std::lock_guard<std::mutex> lock(backing_.mutex());
    return new FlagosGeneratorImpl(device_.index(), backing_.clone());
  }

  // mutable: the const methods above lock its mutex.
  mutable at::Generator backing_;
};

at::Generator make_flagos_generator(c10::DeviceIndex index, at::Generator backing) {
  return at::make_generator<FlagosGeneratorImpl>(index, std::move(backing));
}

// One per device, made on first use: on a CUDA backing cuda:i's default
// generator exists only after CUDA's lazy init.
std::once_flag defaults_once;
std::vector<at::Generator> defaults;

}  // namespace

const at::Generator& default_generator(c10::DeviceIndex index) {
  const c10::DeviceIndex i = index_or_current(index);
  std::call_once(defaults_once, [] {
    const Backing& b = g_backing;
    for (c10::DeviceIndex d = 0; d < b.count; ++d) {
      if (b.host) {
        // Seeded like the CPU's default generator: non-deterministically,
        // until torch.manual_seed seeds all of them.
        const uint64_t seed = c10::detail::getNonDeterministicRandom();
        defaults.push_back(make_flagos_generator(d, at::detail::createCPUGenerator(seed)));
      } else {
        defaults.push_back(make_flagos_generator(d, at::detail::getCUDAHooks().getDefaultGenerator(d)));
      }
    }
  });
  return defaults[static_cast<size_t>(i)];
}

at::Generator new_generator(c10::DeviceIndex index) {
  const c10::DeviceIndex i = index_or_current(index);
  if (g_backing.host) {
    return make_flagos_generator(i, at::detail::createCPUGenerator());
  }
  return make_flagos_generator(i, at::detail::getCUDAHooks().getNewGenerator(i));
}

const at::Generator& backing_generator(const at::Generator& gen) {
  auto* impl = dynamic_cast<FlagosGeneratorImpl*>(gen.unsafeGetGeneratorImpl());
  TORCH_CHECK(impl != nullptr, "Expected a '", c10::DeviceTypeName(kFlagos, true),
              "' device type for generator but found '", gen.device().str(), "'");
  return impl->backing();
}

}  // namespace runtime
}  // namespace torch_fl
