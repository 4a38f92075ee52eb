// Which kernel scaled_dot_product_attention runs for accel tensors.
//
// F.scaled_dot_product_attention is a composite: it asks a per-device-type
// DispatchStub (_fused_sdp_choice_stub) which backend suits the inputs (a
// fused kernel: flash, memory-efficient, cuDNN; or the math decomposition),
// then calls that backend's operator. A device type without a stub entry
// always gets the math decomposition, which is slower than the target's fused
// kernels and not bitwise their result. accel's entry asks the target's own
// entry, over target tensors with the same metadata, and follows its choice
// wherever the composite can take it for accel tensors: the fused operators
// then run the target's kernels through the alias fallback, and autograd uses
// their backward operators, exactly as on the target.
//
// The one branch the composite cannot take for accel is flash attention on a
// CUDA target: for any device but cuda it calls the CPU flash operator
// (_scaled_dot_product_flash_attention_for_cpu), which CUDA lacks. There the
// math decomposition stays. (CUDA picks flash for float16/bfloat16 inputs it
// suits; for the rest it picks memory-efficient or cuDNN attention, which
// accel follows.)
//
// The entry only reads metadata. It also runs while tracing (FakeTensorMode,
// torch.compile), on fake tensors with possibly symbolic shapes, so the
// target tensors describe the accel tensors without pointing at any memory,
// and the target's choice (the operator _fused_sdp_choice, whose target
// kernel is the target's stub entry) is redispatched straight to the target's
// kernel: no dispatch mode (FakeTensorMode) intercepts it.

#include <csrc/runtime/Runtime.h>

#include <ATen/RedispatchFunctions.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/transformers/attention.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/TensorImpl.h>

#include <optional>

namespace torch_accel {
namespace {

constexpr auto kAccel = c10::DeviceType::PrivateUse1;

// A target tensor with `accel`'s sizes, strides, offset, dtype and
// requires_grad, over no memory: only its metadata may be read.
at::Tensor targetDescription(const at::Tensor& accel) {
  const c10::Device device = targetDevice(accel.device().index());
  c10::Storage storage(
      c10::Storage::use_byte_size_t(), 0, c10::DataPtr(nullptr, device), /*allocator=*/nullptr, /*resizable=*/false);
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      std::move(storage),
      c10::DispatchKeySet(c10::computeDispatchKey(std::nullopt, at::kStrided, device)),
      accel.dtype());
  impl->set_sizes_and_strides(accel.sym_sizes(), accel.sym_strides(), accel.sym_storage_offset());
  at::Tensor description(std::move(impl));
  if (accel.requires_grad()) {
    description.set_requires_grad(true); // some backends refuse inputs that need gradients
  }
  return description;
}

at::Tensor describeIfAccel(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().type() == kAccel ? targetDescription(tensor) : tensor;
}

int64_t fusedSdpChoice(
    const at::Tensor& query,
    const at::Tensor& key,
    const at::Tensor& value,
    const std::optional<at::Tensor>& attn_mask,
    double dropout_p,
    bool is_causal,
    std::optional<double> scale,
    bool enable_gqa) {
  const c10::DeviceType target = runtime().targetType();
  // The target's checks may consult the current device (CUDA: its compute capability).
  c10::DeviceGuard device_guard(c10::Device(kAccel, query.device().index()));
  std::optional<at::Tensor> mask;
  if (attn_mask.has_value()) {
    mask = describeIfAccel(*attn_mask);
  }
  const auto target_keys =
      c10::DispatchKeySet(c10::computeDispatchKey(std::nullopt, at::kStrided, targetDevice(query.device().index())));
  const auto choice = static_cast<at::SDPBackend>(at::redispatch::_fused_sdp_choice(
      target_keys,
      describeIfAccel(query),
      describeIfAccel(key),
      describeIfAccel(value),
      mask,
      dropout_p,
      is_causal,
      scale,
      enable_gqa));
  if (choice == at::SDPBackend::flash_attention && target != c10::DeviceType::CPU) {
    return static_cast<int64_t>(at::SDPBackend::math); // see the file comment
  }
  return static_cast<int64_t>(choice);
}

} // namespace
} // namespace torch_accel

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_accel::fusedSdpChoice)
} // namespace at::native
