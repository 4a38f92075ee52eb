#include <csrc/python/Interop.h>

#include <csrc/aten/TargetTensor.h>
#include <csrc/core/AccelDevice.h>

#include <c10/util/Exception.h>

namespace torch_accel {

void initInteropBindings(pybind11::module& m) {
  // A target tensor (cpu on the host runtime, cuda on the CUDA runtime) over
  // the accel tensor's memory, with its sizes, strides and offset, that keeps
  // that memory alive: what accel exports through DLPack and
  // __cuda_array_interface__, so that a consumer sees the memory as what it
  // is (host memory, CUDA memory) and may outlive the accel tensor.
  m.def("_target_view_keeping_alive", [](const at::Tensor& tensor) {
    TORCH_CHECK_VALUE(tensor.defined() && isAccel(tensor), "expected an accel tensor, got one on ", tensor.device());
    TORCH_CHECK_VALUE(tensor.layout() == at::kStrided, "expected a strided accel tensor, got layout ", tensor.layout());
    return toTargetKeepingAlive(tensor);
  });
}

} // namespace torch_accel
