#pragma once

// Quantized tensors on both sides of the alias fallback.
//
// A quantized accel tensor is a QTensorImpl (dispatch key
// QuantizedPrivateUse1) over accel memory, with a quantizer. Its target view
// is a QTensorImpl of the target's quantized key (QuantizedCPU or
// QuantizedCUDA) over the same memory, with a target quantizer: the same
// parameters, and for per-channel schemes target views of the accel scales
// and zero points. A quantized target result maps back the other way.
// Per-tensor quantizers (and the unknown quantizer of a tensor whose scheme is
// not chosen yet) hold no tensors and serve both sides as they are.

#include <csrc/aten/TargetTensor.h>

#include <ATen/core/Tensor.h>
#include <ATen/quantized/Quantizer.h>

namespace torch_accel {

// The quantizer of a quantized tensor.
at::QuantizerPtr quantizerOf(const at::Tensor& quantized);

// The quantizer that stands for `quantizer` on the other side: its tensors
// (per-channel scales and zero points) mapped by `map`; `quantizer` itself
// when it holds no tensors.
at::QuantizerPtr mapQuantizer(const at::QuantizerPtr& quantizer, MapTensor map);

// The quantized target tensor over `target`'s memory and metadata (`target`:
// a target view of a quantized accel tensor, made by TargetTensor), quantized
// by `quantizer`, a target quantizer.
at::Tensor quantizedTarget(const at::Tensor& target, at::QuantizerPtr quantizer);

// A quantized accel tensor over `storage` (accel memory) with the sizes,
// strides, offset and dtype of `like` (a target tensor), quantized by
// `quantizer`, an accel quantizer. `keys`: the accel tensor's keys; for a view
// (`is_view`), those of its base.
at::Tensor quantizedAccel(
    c10::Storage storage, const at::Tensor& like, at::QuantizerPtr quantizer, c10::DispatchKeySet keys, bool is_view);

} // namespace torch_accel
