#include <csrc/aten/QuantizedTargetTensor.h>

#include <ATen/quantized/QTensorImpl.h>

namespace torch_accel {

at::QuantizerPtr quantizerOf(const at::Tensor& quantized) {
  return at::get_qtensorimpl(quantized)->quantizer();
}

at::QuantizerPtr mapQuantizer(const at::QuantizerPtr& quantizer, MapTensor map) {
  // Per-channel quantizers hold their scales and zero points as tensors on
  // the tensor's device; the others (per-tensor affine, and the unknown
  // quantizer of a tensor made by `empty` with a quantized dtype) hold
  // numbers only.
  if (const auto* per_channel = dynamic_cast<const at::PerChannelAffineFloatQParamsQuantizer*>(quantizer.get())) {
    return c10::make_intrusive<at::PerChannelAffineFloatQParamsQuantizer>(
        quantizer->scalar_type(), map(per_channel->scales()), map(per_channel->zero_points()), per_channel->axis());
  }
  if (const auto* per_channel = dynamic_cast<const at::PerChannelAffineQuantizer*>(quantizer.get())) {
    return c10::make_intrusive<at::PerChannelAffineQuantizer>(
        quantizer->scalar_type(), map(per_channel->scales()), map(per_channel->zero_points()), per_channel->axis());
  }
  return quantizer;
}

at::Tensor quantizedTarget(const at::Tensor& target, at::QuantizerPtr quantizer) {
  auto impl = c10::make_intrusive<at::QTensorImpl>(
      c10::Storage(target.storage()),
      c10::DispatchKeySet(targetDispatchKey(c10::DispatchKey::Quantized)),
      target.dtype(),
      std::move(quantizer));
  impl->remove_autograd_key();
  impl->set_sizes_and_strides(target.sizes(), target.strides(), target.storage_offset());
  return at::Tensor(std::move(impl));
}

at::Tensor quantizedAccel(
    c10::Storage storage, const at::Tensor& like, at::QuantizerPtr quantizer, c10::DispatchKeySet keys, bool is_view) {
  // The base's keys (a view), or the accel quantized key: the constructor
  // adds the autograd keys (unless in inference mode).
  auto impl = is_view ? c10::make_intrusive<at::QTensorImpl>(
                            c10::TensorImpl::VIEW, std::move(storage), keys, like.dtype(), std::move(quantizer))
                      : c10::make_intrusive<at::QTensorImpl>(
                            std::move(storage),
                            c10::DispatchKeySet(c10::DispatchKey::QuantizedPrivateUse1),
                            like.dtype(),
                            std::move(quantizer));
  impl->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  return at::Tensor(std::move(impl));
}

} // namespace torch_accel
