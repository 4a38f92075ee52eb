// scaled_dot_product_attention for accel tensors.
//
// ATen's operator is a CompositeImplicitAutograd composite: it asks the device
// type's backend choice (AttentionBackendChoice.cpp, the target's choice for
// accel) and calls that backend's operator, which autograd then
// differentiates. For a flash-attention choice it calls CUDA's flash operator
// for cuda tensors only and the CPU's for every other device type, accel's
// included: right on the host runtime, impossible on the CUDA runtime (CUDA
// has no kernel for the CPU operator).
//
// So accel registers this kernel for the operator, for PrivateUse1 and
// AutogradPrivateUse1 (a backend kernel alone would take the composite's place
// below autograd only, leaving autograd with nothing to differentiate). It
// calls the composite itself, except where the target chose flash attention
// and the composite would not run the target's flash operator
// (Runtime::compositeRunsTargetFlashAttention): there it takes the composite's
// cuda branch, so that autograd, and tracers (torch.compile), record the same
// operators as for cuda: the head dimension padded to a multiple of 8,
// _scaled_dot_product_flash_attention (whose derivative is
// _scaled_dot_product_flash_attention_backward), the padding sliced off. The
// flash operators run CUDA's kernels through the alias fallback.

#include <csrc/aten/AttentionBackendChoice.h>
#include <csrc/runtime/Runtime.h>

#include <ATen/Functions.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ops/scaled_dot_product_attention_native.h>
#include <c10/core/SymInt.h>
#include <torch/library.h>

#include <array>
#include <optional>

namespace torch_accel {
namespace {

// The alignment of the head dimension CUDA's flash kernels need; the composite pads to it.
constexpr int64_t kFlashHeadDimAlignment = 8;

at::Tensor padHeadDimension(const at::Tensor& tensor) {
  const c10::SymInt head_dim = tensor.sym_size(-1);
  if (head_dim % kFlashHeadDimAlignment == 0) {
    return tensor;
  }
  const std::array<c10::SymInt, 2> padding{c10::SymInt(0), kFlashHeadDimAlignment - head_dim % kFlashHeadDimAlignment};
  return at::pad_symint(tensor, padding);
}

// The composite's flash branch for cuda tensors, for accel tensors.
at::Tensor flashAttentionAsForCuda(
    const at::Tensor& query,
    const at::Tensor& key,
    const at::Tensor& value,
    double dropout_p,
    bool is_causal,
    std::optional<double> scale) {
  const c10::SymInt head_dim = query.sym_size(-1);
  // The scale is that of the unpadded head dimension.
  const double softmax_scale = sdp::calculate_scale(query, scale).guard_float(__FILE__, __LINE__);
  // (padded in this order, as the composite does, so that graphs are cuda's)
  const at::Tensor padded_query = padHeadDimension(query);
  const at::Tensor padded_key = padHeadDimension(key);
  const at::Tensor padded_value = padHeadDimension(value);
  at::Tensor out = std::get<0>(at::_scaled_dot_product_flash_attention(
      padded_query,
      padded_key,
      padded_value,
      dropout_p,
      is_causal,
      /*return_debug_mask=*/false,
      softmax_scale));
  if (out.sym_size(-1) != head_dim) {
    out = out.slice_symint(-1, 0, head_dim);
  }
  return out;
}

at::Tensor scaledDotProductAttention(
    const at::Tensor& query,
    const at::Tensor& key,
    const at::Tensor& value,
    const std::optional<at::Tensor>& attn_mask,
    double dropout_p,
    bool is_causal,
    std::optional<double> scale,
    bool enable_gqa) {
  if (!runtime().compositeRunsTargetFlashAttention() &&
      targetSdpChoice(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa) ==
          at::SDPBackend::flash_attention) {
    return flashAttentionAsForCuda(query, key, value, dropout_p, is_causal, scale);
  }
  return at::native::scaled_dot_product_attention(
      query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("scaled_dot_product_attention", TORCH_FN(scaledDotProductAttention));
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("scaled_dot_product_attention", TORCH_FN(scaledDotProductAttention));
}

} // namespace torch_accel
