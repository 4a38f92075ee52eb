// The accel view of an AOTInductor model's constant, used by the C++ wrapper
// AOTInductor generates for accel (torch_accel/_inductor/cpp_wrapper.py).
//
// A model's constants are loaded by PyTorch's AOTInductor runtime, which
// knows devices by name (cpu, cuda, xpu, mps) and not accel: they are loaded
// as constants of the runtime's target device (host memory on the host
// runtime, CUDA memory on the CUDA runtime), which is accel memory too. The
// wrapper reads each through an accel tensor over the same memory, on the
// current accel device (the one the model runs on: AccelAOTIModelRunner
// guards it). See docs/compile.md, "cpp_wrapper and AOTInductor".
#pragma once

#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#ifdef __cplusplus
extern "C" {
#endif

// A new handle to an accel tensor over ``constant``'s memory, with its sizes,
// strides, offset and dtype, on the current accel device; it keeps
// ``constant``'s storage alive.
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_accel_constant_view(AtenTensorHandle constant, AtenTensorHandle* ret);

#ifdef __cplusplus
} // extern "C"

#if defined(TORCH_INDUCTOR_CPP_WRAPPER) || defined(AOTI_STANDALONE)
#include <torch/csrc/inductor/aoti_runtime/utils.h>

namespace torch::aot_inductor {
inline RAIIAtenTensorHandle accel_constant_view(AtenTensorHandle constant) {
  AtenTensorHandle view = nullptr;
  AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_accel_constant_view(constant, &view));
  return RAIIAtenTensorHandle(view);
}
} // namespace torch::aot_inductor
#endif
#endif
