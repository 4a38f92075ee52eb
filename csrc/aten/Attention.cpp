// scaled_dot_product_attention on accel: the fused kernel the target picks.
//
// ATen's scaled_dot_product_attention is a composite that asks the
// _fused_sdp_choice_stub of the query's device type which backend to run, and
// takes the math decomposition for a device type without a stub kernel (as
// PrivateUse1 had). For the other choices it calls one fused operator, which
// accel runs through the alias fallback on the target's kernel:
//
//   - flash_attention: _scaled_dot_product_flash_attention_for_cpu for every
//     device type but CUDA (ATen's CUDA path pads the head dimension and
//     calls _scaled_dot_product_flash_attention instead);
//   - math: _scaled_dot_product_attention_math, the decomposition.
//
// So accel asks its target's own choice where the composite then runs the
// target's own kernel for an accel tensor, which is the case for a CPU
// target: CPU's choice (flash attention when its constraints hold) is
// computed from the tensors' metadata only, so it is the same for accel
// tensors, real or fake. torch.compile traces through the same stub, so
// Inductor calls the fused kernel for accel exactly where it does for cpu.
// For a CUDA target, CUDA's choice (flash) would send accel tensors to the CPU
// kernel; there accel keeps the math path (see the README).

#include <csrc/runtime/Runtime.h>

#include <ATen/SDPBackend.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_native.h>

namespace torch_accel {
namespace {

int64_t fusedSdpChoice(
    const at::Tensor& query,
    const at::Tensor& key,
    const at::Tensor& value,
    const std::optional<at::Tensor>& attn_mask,
    double dropout_p,
    bool is_causal,
    std::optional<double> scale,
    bool enable_gqa) {
  if (runtime().targetType() != c10::DeviceType::CPU) {
    return static_cast<int64_t>(at::SDPBackend::math);
  }
  // CPU's stub kernel (called directly: the stub's own call path is not
  // part of libtorch's exported interface).
  return at::native::_fused_sdp_choice_cpp(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa);
}

} // namespace
} // namespace torch_accel

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_accel::fusedSdpChoice)
} // namespace at::native
