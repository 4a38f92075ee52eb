#pragma once

#include <csrc/core/AccelDevice.h>

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

namespace torch_accel {

// An accel random number generator. It wraps a target generator of its own
// (a CUDA Philox generator, or a CPU Mersenne Twister) and forwards seed,
// offset and state to it: an accel generator and a target generator seeded
// alike produce the same numbers, since the same kernels consume them, while
// accel's random streams stay independent of the target device's.
class AccelGeneratorImpl final : public c10::GeneratorImpl {
public:
  AccelGeneratorImpl(c10::DeviceIndex device, at::Generator target);

  // The wrapped generator, handed to target kernels by the alias fallback.
  const at::Generator& target() const {
    return target_;
  }

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  void graphsafe_set_state(const c10::intrusive_ptr<c10::GeneratorImpl>& new_state) override;
  c10::intrusive_ptr<c10::GeneratorImpl> graphsafe_get_state() const override;

  static c10::DeviceType device_type() {
    return kAccel;
  }

private:
  AccelGeneratorImpl* clone_impl() const override;

  at::Generator target_;
};

// The default generator of accel:`device` (torch.accel.default_generators),
// created on first use with the target's default seed.
const at::Generator& defaultAccelGenerator(c10::DeviceIndex device);

// A new accel generator for accel:`device` (torch.Generator(device="accel")).
at::Generator newAccelGenerator(c10::DeviceIndex device);

// The target generator behind an accel one.
const at::Generator& targetGenerator(const at::Generator& accel);

// Some random operators take no generator argument and draw from the target
// device's default generator (native_dropout, fused attention with dropout).
// While this scope lives, that generator carries the state of accel:
// `device`'s default generator, which gets the advanced state back at the
// end; the target's own state is restored. Not atomic with respect to other
// threads using the target's default generator at the same time. While the
// device's current stream is capturing a graph, the two share accel's
// generator state object instead (graph-safe: see CudaGraph.cpp).
class TargetDefaultGeneratorAsAccel {
public:
  explicit TargetDefaultGeneratorAsAccel(c10::DeviceIndex device);
  ~TargetDefaultGeneratorAsAccel();
  TargetDefaultGeneratorAsAccel(const TargetDefaultGeneratorAsAccel&) = delete;
  TargetDefaultGeneratorAsAccel& operator=(const TargetDefaultGeneratorAsAccel&) = delete;

private:
  at::Generator target_default_;
  at::Generator accel_target_;
  c10::intrusive_ptr<c10::TensorImpl> saved_state_;
  // While a graph captures: the target default generator's own state
  // object, which it gets back at the end.
  c10::intrusive_ptr<c10::GeneratorImpl> saved_generator_;
};

} // namespace torch_accel
