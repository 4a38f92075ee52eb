#pragma once

// Which backend scaled_dot_product_attention takes for accel tensors (see
// AttentionBackendChoice.cpp).

#include <ATen/SDPBackend.h>
#include <ATen/core/Tensor.h>

#include <optional>

namespace torch_accel {

// The backend the target's own choice picks for target tensors with these
// accel tensors' metadata: what the target device would run (CUDA's choice
// honours torch.nn.attention.sdpa_kernel and the device's capability). Reads
// metadata only, so it also serves fake tensors while tracing.
at::SDPBackend targetSdpChoice(
    const at::Tensor& query,
    const at::Tensor& key,
    const at::Tensor& value,
    const std::optional<at::Tensor>& attn_mask,
    double dropout_p,
    bool is_causal,
    std::optional<double> scale,
    bool enable_gqa);

} // namespace torch_accel
