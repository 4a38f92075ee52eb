// PrivateUse1HooksInterface for accel: how ATen asks generic questions
// (is the backend built/available, which device owns a pointer, lazy init)
// without knowing about torch_accel. Registered once, at load time.
//
// The hooks live on the operator floor, not in csrc/runtime: initialising
// accel registers the fallbacks of the other tensor kinds, and resizing a
// storage copies with accel's kernels, both of which are this floor's. The
// runtime floor stays below it (docs/design.md, "Layers and data flow").

#include <csrc/aten/AliasFallback.h>
#include <csrc/aten/StorageResize.h>
#include <csrc/core/AccelDevice.h>
#include <csrc/runtime/AccelGenerator.h>
#include <csrc/runtime/Runtime.h>

#include <ATen/Context.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace torch_accel {
namespace {

const c10::impl::DeviceGuardImplInterface& guard() {
  return *c10::impl::getDeviceGuardImpl(kAccel);
}

struct AccelHooks final : public at::PrivateUse1HooksInterface {
  void init() const override {
    initializeRuntime();
    // The fallbacks of the other tensor kinds and the routing to the target's
    // kernels, also where C++ initialises accel before torch.accel does.
    preferTargetKernels();
  }

  bool isBuilt() const override {
    return true;
  }

  bool isAvailable() const override {
    return deviceCount() > 0;
  }

  c10::DeviceIndex deviceCount() const override {
    return guard().deviceCount();
  }

  void setCurrentDevice(c10::DeviceIndex device) const override {
    guard().setDevice(c10::Device(kAccel, device));
  }

  c10::DeviceIndex getCurrentDevice() const override {
    return guard().getDevice().index();
  }

  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    return guard().exchangeDevice(c10::Device(kAccel, device)).index();
  }

  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    // Restoring a device must not create a context on it: the runtime's
    // uncheckedSetDevice only switches to devices that already have one
    // (on CUDA, c10::cuda::MaybeSetDevice).
    const auto previous = getCurrentDevice();
    if (previous != device) {
      guard().uncheckedSetDevice(c10::Device(kAccel, device));
    }
    return previous;
  }

  bool hasPrimaryContext(c10::DeviceIndex device) const override {
    checkDeviceIndex(device);
    return runtime().hasPrimaryContext(device);
  }

  at::Device getDeviceFromPtr(void* data) const override {
    return runtime().getDeviceFromPtr(data);
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return defaultAccelGenerator(device < 0 ? getCurrentDevice() : device);
  }

  at::Generator getNewGenerator(c10::DeviceIndex device) const override {
    return newAccelGenerator(device < 0 ? getCurrentDevice() : device);
  }

  bool isPinnedPtr(const void* data) const override {
    // Asked of every CPU tensor's is_pinned(); must not initialise anything.
    return guard().deviceCount() > 0 && runtime().isPinnedPtr(data);
  }

  c10::Allocator* getPinnedMemoryAllocator() const override {
    // Pinned memory is the runtime's (cudaHostAlloc on the CUDA runtime).
    checkNotInBadFork();
    checkDeviceAvailable();
    at::globalContext().lazyInitDevice(kAccel);
    return runtime().pinnedAllocator();
  }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resizeStorageBytes(storage.unsafeGetStorageImpl(), newsize);
  }
};

// Registered during static initialisation so `import torch_accel` is all it
// takes; RegisterPrivateUse1HooksInterface rejects a second registration.
const bool registered = [] {
  static AccelHooks hooks;
  at::RegisterPrivateUse1HooksInterface(&hooks);
  return true;
}();

} // namespace
} // namespace torch_accel
