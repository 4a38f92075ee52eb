// Which kernel scaled_dot_product_attention runs for accel tensors.
//
// F.scaled_dot_product_attention is a composite: it asks a per-device-type
// DispatchStub (_fused_sdp_choice_stub) which backend suits the inputs (a
// fused kernel: flash, memory-efficient, cuDNN; or the math decomposition),
// then calls that backend's operator. A device type without a stub entry
// always gets the math decomposition, which is slower than the target's fused
// kernels and not bitwise their result. accel's entry asks the target's own
// entry, over target tensors with the same metadata (targetSdpChoice), and
// follows its choice: the fused operators then run the target's kernels
// through the alias fallback, and autograd uses their backward operators,
// exactly as on the target.
//
// The one branch the composite cannot take for accel is flash attention on a
// CUDA target: for any device but cuda it calls the CPU flash operator
// (_scaled_dot_product_flash_attention_for_cpu), which CUDA lacks. accel's
// own SDPA kernel (ScaledDotProductAttention.cpp) runs that branch as the
// composite does for cuda, and calls the composite only for the other
// backends. Where the composite runs for accel without that kernel (a tracer
// that decomposes SDPA below autograd), this entry gives it the backend CUDA
// would take after flash (Runtime::flashAttentionSubstitute: memory-efficient
// attention where it accepts the inputs, else math).
//
// The entry only reads metadata. It also runs while tracing (FakeTensorMode,
// torch.compile), on fake tensors with possibly symbolic shapes, so the
// target tensors describe the accel tensors without pointing at any memory,
// and the target's choice (the operator _fused_sdp_choice, whose target
// kernel is the target's stub entry) is redispatched straight to the target's
// kernel: no dispatch mode (FakeTensorMode) intercepts it.

#include <csrc/aten/AttentionBackendChoice.h>
#include <csrc/core/AccelDevice.h>
#include <csrc/runtime/Runtime.h>

#include <ATen/RedispatchFunctions.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/TensorImpl.h>

#include <optional>

namespace torch_accel {
namespace {

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

std::optional<at::Tensor> describeIfAccel(const std::optional<at::Tensor>& tensor) {
  return tensor.has_value() ? std::optional<at::Tensor>(describeIfAccel(*tensor)) : std::nullopt;
}

// Runs `choose` on accel:`device`: the target's checks may consult the
// current device (CUDA: its compute capability). Where there is one device it
// is current already, and is not set again (nor is a device needed: tests
// that mock the target's choice trace fake tensors without a GPU).
template <typename Choose> at::SDPBackend onDevice(c10::DeviceIndex device, Choose choose) {
  c10::OptionalDeviceGuard device_guard;
  if (runtime().deviceCount() > 1) {
    device_guard.reset_device(c10::Device(kAccel, device));
  }
  return choose();
}

at::SDPBackend
choiceForDescriptions(const sdp::sdp_params& target, c10::DeviceIndex device, std::optional<double> scale) {
  const auto target_keys =
      c10::DispatchKeySet(c10::computeDispatchKey(std::nullopt, at::kStrided, targetDevice(device)));
  return onDevice(device, [&] {
    return static_cast<at::SDPBackend>(at::redispatch::_fused_sdp_choice(
        target_keys,
        target.query,
        target.key,
        target.value,
        target.attn_mask,
        target.dropout,
        target.is_causal,
        scale,
        target.enable_gqa));
  });
}

sdp::sdp_params describeParams(
    const at::Tensor& query,
    const at::Tensor& key,
    const at::Tensor& value,
    const std::optional<at::Tensor>& attn_mask,
    double dropout_p,
    bool is_causal,
    bool enable_gqa) {
  return sdp::sdp_params{
      describeIfAccel(query),
      describeIfAccel(key),
      describeIfAccel(value),
      describeIfAccel(attn_mask),
      dropout_p,
      is_causal,
      enable_gqa};
}

// The stub entry, which ATen's composite calls.
int64_t compositeSdpChoice(
    const at::Tensor& query,
    const at::Tensor& key,
    const at::Tensor& value,
    const std::optional<at::Tensor>& attn_mask,
    double dropout_p,
    bool is_causal,
    std::optional<double> scale,
    bool enable_gqa) {
  const sdp::sdp_params target = describeParams(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa);
  const c10::DeviceIndex device = query.device().index();
  at::SDPBackend choice = choiceForDescriptions(target, device, scale);
  if (choice == at::SDPBackend::flash_attention && !runtime().compositeRunsTargetFlashAttention()) {
    choice = onDevice(device, [&] { return runtime().flashAttentionSubstitute(target); }); // see the file comment
  }
  return static_cast<int64_t>(choice);
}

} // namespace

at::SDPBackend targetSdpChoice(
    const at::Tensor& query,
    const at::Tensor& key,
    const at::Tensor& value,
    const std::optional<at::Tensor>& attn_mask,
    double dropout_p,
    bool is_causal,
    std::optional<double> scale,
    bool enable_gqa) {
  return choiceForDescriptions(
      describeParams(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa), query.device().index(), scale);
}

} // namespace torch_accel

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_accel::compositeSdpChoice)
} // namespace at::native
