// The AOTInductor model runner for accel: what torch._inductor.aoti_load_package
// (PyTorch's AOTIModelPackageLoader) creates for a package compiled for accel,
// registered under the device name "accel" in PyTorch's runner registry.
//
// PyTorch's model runtime (the base class of the model a package holds) knows
// its device by name, and only its own devices: the model is created for the
// runtime's target device (cpu on the host runtime, cuda:N on the CUDA runtime)
// and loads its constants there, which is accel memory too. What makes it an
// accel model is the wrapper Inductor generated (torch_accel/_inductor/
// cpp_wrapper.py): it allocates on the current accel device, reads constants
// through accel views, and calls operators through accel's C shim. So the
// runner loads that shim before the model, and runs the model with
// accel:N current and, unless the caller gives one, on accel:N's current
// stream. See docs/compile.md, "cpp_wrapper and AOTInductor".
#include <csrc/core/AccelDevice.h>
#include <csrc/inductor/AOTIShim.h>
#include <csrc/runtime/Runtime.h>

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/inductor/aoti_runner/model_container_runner.h>
#include <torch/csrc/inductor/aoti_torch/utils.h>

#include <memory>
#include <string>

namespace torch_accel::inductor {

namespace {

class AccelAOTIModelRunner final : public torch::inductor::AOTIModelContainerRunner {
public:
  AccelAOTIModelRunner(
      const std::string& model_so_path,
      size_t num_models,
      c10::DeviceIndex device,
      const std::string& target_device,
      const std::string& bin_dir,
      bool run_single_threaded)
      : AOTIModelContainerRunner(model_so_path, num_models, target_device, bin_dir, run_single_threaded),
        device_(device) {}

protected:
  std::vector<at::Tensor> run_impl(std::vector<AtenTensorHandle>& input_handles, void* stream_handle) override {
    checkInputDevices(input_handles);
    c10::DeviceGuard device_guard(c10::Device(kAccel, device_));
    if (stream_handle == nullptr) {
      // accel's current stream: on the CUDA runtime a CUDA stream, the one
      // the model's Triton kernels launch on and accel's operators run on.
      const auto* guard = c10::impl::getDeviceGuardImpl(kAccel);
      stream_handle = guard->getStreamNativeHandle(guard->getStream(c10::Device(kAccel, device_)));
    }
    return AOTIModelContainerRunner::run_impl(input_handles, stream_handle);
  }

private:
  // The model's code reads accel inputs as memory of the device it runs on:
  // an input on another accel device would be read where it is not.
  void checkInputDevices(const std::vector<AtenTensorHandle>& input_handles) const {
    for (size_t i = 0; i < input_handles.size(); ++i) {
      const at::Tensor& input = *torch::aot_inductor::tensor_handle_to_tensor_pointer(input_handles[i]);
      TORCH_CHECK(
          !isAccel(input) || input.device().index() == device_,
          "accel: this AOTInductor model runs on accel:",
          static_cast<int>(device_),
          " but its input ",
          i,
          " is on ",
          input.device(),
          " (load the package with device_index=",
          static_cast<int>(input.device().index()),
          " to run it there)");
    }
  }

  c10::DeviceIndex device_;
};

// The accel device a runner is created for: "accel" (the current device) or "accel:N".
c10::DeviceIndex accelDeviceOf(const std::string& device_str) {
  const c10::Device device(device_str);
  TORCH_CHECK(
      device.type() == kAccel, "accel: an AOTInductor runner for accel was asked for device '", device_str, "'");
  if (!device.has_index()) {
    return c10::impl::getDeviceGuardImpl(kAccel)->getDevice().index();
  }
  checkDeviceIndex(device.index());
  return device.index();
}

// The name PyTorch's model runtime knows the target device of accel:`index` by.
std::string targetDeviceName(c10::DeviceIndex index) {
  const c10::Device target = targetDevice(index);
  // The runtime accepts cpu without an index only.
  return target.is_cpu() ? std::string("cpu") : target.str();
}

std::unique_ptr<torch::inductor::AOTIModelContainerRunner> createAccelRunner(
    const std::string& model_so_path,
    size_t num_models,
    const std::string& device_str,
    const std::string& bin_dir,
    const bool run_single_threaded) {
  checkDeviceAvailable();
  const c10::DeviceIndex device = accelDeviceOf(device_str);
  // Before the model library, which calls the shim but does not link it.
  loadAOTIShim();
  return std::make_unique<AccelAOTIModelRunner>(
      model_so_path, num_models, device, targetDeviceName(device), bin_dir, run_single_threaded);
}

const torch::inductor::RegisterAOTIModelRunner registerAccelRunner("accel", &createAccelRunner);

} // namespace

} // namespace torch_accel::inductor
