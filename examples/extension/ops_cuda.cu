// The CUDA kernels of the example extension (ops.cpp), for the CUDA runtime:
// launched on the stream they are given, accel's current CUDA stream.

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAException.h>

#include <cuda_runtime_api.h>

namespace {

template <typename scalar_t>
__global__ void scaleAddKernel(const scalar_t* x, const scalar_t* y, scalar_t alpha, scalar_t* out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = x[i] + alpha * y[i];
  }
}

template <typename scalar_t> __global__ void squareKernel(const scalar_t* x, scalar_t* out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = x[i] * x[i];
  }
}

constexpr int kThreads = 256;

unsigned blocksFor(int64_t n) {
  return static_cast<unsigned>((n + kThreads - 1) / kThreads);
}

} // namespace

void scaleAddCuda(const at::Tensor& x, const at::Tensor& y, double alpha, at::Tensor& out, cudaStream_t stream) {
  const int64_t n = x.numel();
  if (n == 0) {
    return;
  }
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "accel_example::scale_add", [&] {
    scaleAddKernel<scalar_t><<<blocksFor(n), kThreads, 0, stream>>>(
        x.const_data_ptr<scalar_t>(),
        y.const_data_ptr<scalar_t>(),
        static_cast<scalar_t>(alpha),
        out.mutable_data_ptr<scalar_t>(),
        n);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void squareCuda(const at::Tensor& x, at::Tensor& out, cudaStream_t stream) {
  const int64_t n = x.numel();
  if (n == 0) {
    return;
  }
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "accel_example::square", [&] {
    squareKernel<scalar_t>
        <<<blocksFor(n), kThreads, 0, stream>>>(x.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(), n);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
