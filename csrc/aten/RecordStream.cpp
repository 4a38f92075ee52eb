// Tensor.record_stream(s): tells the allocator that `s` uses the tensor's
// memory, so the memory is not reused before s's work on it is done.

#include <csrc/core/AccelDevice.h>

#include <ATen/core/Tensor.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

namespace torch_accel {
namespace {

void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(
      stream.device_type() == kAccel,
      "record_stream of an accel tensor needs an accel stream, got a stream of ",
      stream.device());
  TORCH_CHECK(
      stream.device_index() == self.device().index(),
      "record_stream: the tensor is on ",
      self.device(),
      " but the stream is on ",
      stream.device());
  c10::impl::getDeviceGuardImpl(kAccel)->recordDataPtrOnStream(self.storage().data_ptr(), stream);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("record_stream", TORCH_FN(record_stream));
}

} // namespace
} // namespace torch_accel
