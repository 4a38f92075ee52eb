#include <csrc/core/AccelDevice.h>
#include <csrc/runtime/AccelGenerator.h>
#include <csrc/runtime/Runtime.h>

#include <ATen/Context.h>

#include <array>
#include <memory>
#include <mutex>

namespace torch_accel {

namespace {

constexpr int kMaxDevices = 64; // c10's limit on devices of one type

// The target generator's own mutex guards its state; callers of an accel
// generator hold the accel one's, kernels the target's.
template <typename Fn> auto withTargetLock(const at::Generator& target, Fn&& fn) {
  c10::GeneratorImpl* impl = target.unsafeGetGeneratorImpl();
  std::lock_guard<std::mutex> lock(impl->mutex_);
  return fn(impl);
}

} // namespace

AccelGeneratorImpl::AccelGeneratorImpl(c10::DeviceIndex device, at::Generator target)
    : c10::GeneratorImpl(c10::Device(kAccel, device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      target_(std::move(target)) {}

void AccelGeneratorImpl::set_current_seed(uint64_t seed) {
  withTargetLock(target_, [&](c10::GeneratorImpl* impl) { impl->set_current_seed(seed); });
}

void AccelGeneratorImpl::set_offset(uint64_t offset) {
  withTargetLock(target_, [&](c10::GeneratorImpl* impl) { impl->set_offset(offset); });
}

uint64_t AccelGeneratorImpl::get_offset() const {
  return withTargetLock(target_, [](c10::GeneratorImpl* impl) { return impl->get_offset(); });
}

uint64_t AccelGeneratorImpl::current_seed() const {
  return withTargetLock(target_, [](c10::GeneratorImpl* impl) { return impl->current_seed(); });
}

uint64_t AccelGeneratorImpl::seed() {
  return withTargetLock(target_, [](c10::GeneratorImpl* impl) { return impl->seed(); });
}

void AccelGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  withTargetLock(target_, [&](c10::GeneratorImpl* impl) { impl->set_state(new_state); });
}

c10::intrusive_ptr<c10::TensorImpl> AccelGeneratorImpl::get_state() const {
  return withTargetLock(target_, [](c10::GeneratorImpl* impl) { return impl->get_state(); });
}

void AccelGeneratorImpl::graphsafe_set_state(const c10::intrusive_ptr<c10::GeneratorImpl>& new_state) {
  auto* accel = dynamic_cast<AccelGeneratorImpl*>(new_state.get());
  TORCH_CHECK(accel != nullptr, "graphsafe_set_state of an accel generator needs another accel generator's state");
  withTargetLock(
      target_, [&](c10::GeneratorImpl* impl) { impl->graphsafe_set_state(accel->target_.getIntrusivePtr()); });
}

c10::intrusive_ptr<c10::GeneratorImpl> AccelGeneratorImpl::graphsafe_get_state() const {
  auto target_state = withTargetLock(target_, [](c10::GeneratorImpl* impl) { return impl->graphsafe_get_state(); });
  return c10::make_intrusive<AccelGeneratorImpl>(device().index(), at::Generator(std::move(target_state)));
}

AccelGeneratorImpl* AccelGeneratorImpl::clone_impl() const {
  auto copy = withTargetLock(target_, [](c10::GeneratorImpl* impl) { return impl->clone(); });
  return new AccelGeneratorImpl(device().index(), at::Generator(std::move(copy)));
}

const at::Generator& defaultAccelGenerator(c10::DeviceIndex device) {
  static std::array<std::once_flag, kMaxDevices> created;
  static std::array<at::Generator, kMaxDevices> generators;
  checkDeviceIndex(device);
  std::call_once(created[device], [&] { generators[device] = newAccelGenerator(device); });
  return generators[device];
}

at::Generator newAccelGenerator(c10::DeviceIndex device) {
  checkDeviceIndex(device);
  return at::make_generator<AccelGeneratorImpl>(device, runtime().newTargetGenerator(device));
}

const at::Generator& targetGenerator(const at::Generator& accel) {
  auto* impl = dynamic_cast<AccelGeneratorImpl*>(accel.unsafeGetGeneratorImpl());
  TORCH_CHECK(impl != nullptr, "Expected an accel generator, got one for ", accel.device());
  return impl->target();
}

TargetDefaultGeneratorAsAccel::TargetDefaultGeneratorAsAccel(c10::DeviceIndex device)
    : target_default_(at::globalContext().defaultGenerator(targetDevice(device))),
      accel_target_(targetGenerator(defaultAccelGenerator(device))) {
  const Runtime& rt = runtime();
  if (rt.isStreamCapturing(rt.getStream(c10::Device(kAccel, device)))) {
    // A graph being captured (CUDA's) forbids setting a generator's seed and
    // offset, and must see the draws on the state it registered (accel's):
    // the target's default generator shares accel's state object instead of
    // copying its values, until the scope ends.
    saved_generator_ = withTargetLock(target_default_, [&](c10::GeneratorImpl* impl) {
      auto saved = impl->graphsafe_get_state();
      impl->graphsafe_set_state(accel_target_.unsafeGetGeneratorImpl()->graphsafe_get_state());
      return saved;
    });
    return;
  }
  auto accel_state = withTargetLock(accel_target_, [](c10::GeneratorImpl* impl) { return impl->get_state(); });
  withTargetLock(target_default_, [&](c10::GeneratorImpl* impl) {
    saved_state_ = impl->get_state();
    impl->set_state(*accel_state);
  });
}

TargetDefaultGeneratorAsAccel::~TargetDefaultGeneratorAsAccel() {
  try {
    if (saved_generator_) {
      withTargetLock(target_default_, [&](c10::GeneratorImpl* impl) { impl->graphsafe_set_state(saved_generator_); });
      return;
    }
    auto advanced = withTargetLock(target_default_, [&](c10::GeneratorImpl* impl) {
      auto state = impl->get_state();
      impl->set_state(*saved_state_);
      return state;
    });
    withTargetLock(accel_target_, [&](c10::GeneratorImpl* impl) { impl->set_state(*advanced); });
  } catch (const std::exception& e) {
    TORCH_WARN("accel: could not hand the random state back from the target's default generator: ", e.what());
  }
}

} // namespace torch_accel
