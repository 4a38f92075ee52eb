// aoti_torch_accel_constant_view (torch_accel/inductor/constant_view.h): part
// of accel's AOTInductor C shim library, libaccel_aoti_shim.so, not of _C.
#include <torch_accel/inductor/constant_view.h>

#include <ATen/Tensor.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/inductor/aoti_torch/utils.h>

using namespace torch::aot_inductor;

AOTITorchError aoti_torch_accel_constant_view(AtenTensorHandle constant, AtenTensorHandle* ret) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({
    const at::Tensor& tensor = *tensor_handle_to_tensor_pointer(constant);
    // The current accel device: the model's (its runner guards it during a run).
    // Given as the target device too, so that ATen does not look the memory
    // up (it is the model's, not accel's allocator's).
    const c10::Device device = c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->getDevice();
    // The storage's own pointer with the tensor's offset, as PyTorch's views
    // have it; the deleter holds the constant's storage for as long as the view lives.
    at::Tensor view = at::for_blob(tensor.storage().mutable_data(), tensor.sizes())
                          .strides(tensor.strides())
                          .storage_offset(tensor.storage_offset())
                          .deleter([keep = tensor.storage()](void*) mutable { keep = {}; })
                          .options(tensor.options().device(device))
                          .target_device(device)
                          .make_tensor();
    *ret = new_tensor_handle(std::move(view));
  });
}
