// An example of a user's extension for accel (docs/extensions.md).
//
// Two operators of the namespace accel_example:
//
//   scale_add(x, y, alpha) = x + alpha * y, with a kernel of its own for accel
//     (TORCH_ACCEL_LIBRARY_IMPL), written against <torch_accel/extension.h>:
//     it checks its arguments, guards the device, allocates the result on it
//     and runs on the current accel stream. On the host runtime the kernel is
//     the CPU kernel's loop over accel memory (host memory); built with CUDA
//     (ops_cuda.cu), it launches a CUDA kernel on accel's current CUDA stream.
//
//   square(x), with kernels for the target only (the CPU, and CUDA when built
//     with CUDA), as a third-party library registers them: on accel tensors it
//     runs through torch_accel's fallback.
//
// Each kernel records the accel stream current while it ran (last_launch()),
// so that the tests can check that accel's work runs where accel says.

#include <torch_accel/extension.h>

#include <torch/extension.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <tuple>

#if defined(TORCH_ACCEL_EXTENSION_CUDA)
#include <ATen/cuda/CUDAContext.h>

void scaleAddCuda(const at::Tensor& x, const at::Tensor& y, double alpha, at::Tensor& out, cudaStream_t stream);
void squareCuda(const at::Tensor& x, at::Tensor& out, cudaStream_t stream);
#endif

namespace {

// What the last kernel saw: the current accel device and stream, the stream's
// native handle, and the handle of the stream it launched its work on (null
// for work on the calling thread).
struct Launch {
  int64_t device = -1;
  int64_t stream_id = 0;
  int64_t native_handle = 0;
  int64_t launched_on = 0;
};
std::mutex launch_mutex;
Launch last;

void recordLaunch(const void* launched_on) {
  const c10::Stream stream = accel::getCurrentStream();
  std::lock_guard<std::mutex> lock(launch_mutex);
  last.device = stream.device_index();
  last.stream_id = stream.id();
  last.native_handle = reinterpret_cast<int64_t>(accel::nativeHandle(stream));
  last.launched_on = reinterpret_cast<int64_t>(launched_on);
}

std::tuple<int64_t, int64_t, int64_t, int64_t> lastLaunch() {
  std::lock_guard<std::mutex> lock(launch_mutex);
  return {last.device, last.stream_id, last.native_handle, last.launched_on};
}

void checkOperands(const at::Tensor& x, const at::Tensor& y) {
  TORCH_CHECK_VALUE(
      x.sizes() == y.sizes(),
      "accel_example::scale_add: x and y must have the same shape, got ",
      x.sizes(),
      " and ",
      y.sizes());
  TORCH_CHECK_VALUE(x.scalar_type() == y.scalar_type(), "accel_example::scale_add: x and y must have the same dtype");
  TORCH_CHECK_VALUE(
      x.device() == y.device(),
      "accel_example::scale_add: x and y must be on the same device, got ",
      x.device(),
      " and ",
      y.device());
}

// The host loop, shared by the CPU kernel and the host runtime's accel kernel
// so that both compute the same bits.
void scaleAddLoop(const at::Tensor& x, const at::Tensor& y, double alpha, at::Tensor& out) {
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "accel_example::scale_add", [&] {
    const auto* xs = x.const_data_ptr<scalar_t>();
    const auto* ys = y.const_data_ptr<scalar_t>();
    auto* outs = out.mutable_data_ptr<scalar_t>();
    const auto a = static_cast<scalar_t>(alpha);
    for (int64_t i = 0; i < x.numel(); ++i) {
      outs[i] = xs[i] + a * ys[i];
    }
  });
}

at::Tensor scaleAddCpu(const at::Tensor& x, const at::Tensor& y, double alpha) {
  checkOperands(x, y);
  const auto xc = x.contiguous();
  const auto yc = y.contiguous();
  auto out = at::empty_like(xc);
  scaleAddLoop(xc, yc, alpha, out);
  return out;
}

at::Tensor scaleAddAccel(const at::Tensor& x, const at::Tensor& y, double alpha) {
  accel::checkAccel(x, "accel_example::scale_add: x");
  accel::checkAccel(y, "accel_example::scale_add: y");
  checkOperands(x, y);
  // The result is allocated, and the kernel runs, on x's device, whatever
  // the current device is.
  accel::DeviceGuard guard(x);
  const auto xc = x.contiguous();
  const auto yc = y.contiguous();
  auto out = at::empty_like(xc);
#if defined(TORCH_ACCEL_EXTENSION_CUDA)
  const cudaStream_t stream = accel::getCurrentCUDAStream();
  scaleAddCuda(xc, yc, alpha, out, stream);
  recordLaunch(stream);
#else
  scaleAddLoop(xc, yc, alpha, out);
  recordLaunch(nullptr);
#endif
  return out;
}

// A target kernel that knows nothing of accel (a third-party CPU kernel):
// torch_accel's fallback runs it on accel memory.
at::Tensor squareCpu(const at::Tensor& x) {
  auto out = x * x;
  recordLaunch(nullptr);
  return out;
}

#if defined(TORCH_ACCEL_EXTENSION_CUDA)
// A third-party CUDA kernel: it launches on the current CUDA stream, which on
// the CUDA runtime is the current accel stream.
at::Tensor squareCudaKernel(const at::Tensor& x) {
  const auto xc = x.contiguous();
  auto out = at::empty_like(xc);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  squareCuda(xc, out, stream);
  recordLaunch(stream);
  return out;
}
#endif

} // namespace

TORCH_LIBRARY(accel_example, m) {
  m.def("scale_add(Tensor x, Tensor y, float alpha) -> Tensor");
  m.def("square(Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL(accel_example, CPU, m) {
  m.impl("scale_add", &scaleAddCpu);
  m.impl("square", &squareCpu);
}

#if defined(TORCH_ACCEL_EXTENSION_CUDA)
TORCH_LIBRARY_IMPL(accel_example, CUDA, m) {
  m.impl("square", &squareCudaKernel);
}
#endif

TORCH_ACCEL_LIBRARY_IMPL(accel_example, m) {
  m.impl("scale_add", &scaleAddAccel);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def(
      "last_launch",
      &lastLaunch,
      "(device, stream id, native handle) of the current accel stream the last kernel saw, and the native "
      "handle of the stream it launched on (0: the calling thread)");
  m.attr("built_with_cuda") =
#if defined(TORCH_ACCEL_EXTENSION_CUDA)
      true;
#else
      false;
#endif
}
