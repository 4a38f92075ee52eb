// The tensor kinds other than plain strided in an operator call: the other
// side of the seam of TargetCall.h. Quantized tensors are strided memory with
// a quantizer whose per-channel parts are tensors; sparse and nested tensors
// are made of parts (SparseTargetTensor.h, NestedTargetTensor.h). Each part
// is an argument or a result of the call of its own, mapped by the dense
// path, so that results that are (views of) parts map back to them.

#include <csrc/aten/NestedTargetTensor.h>
#include <csrc/aten/QuantizedTargetTensor.h>
#include <csrc/aten/SparseTargetTensor.h>
#include <csrc/aten/TargetCall.h>

#include <ATen/quantized/QTensorImpl.h>

#include <string>

namespace torch_accel {
namespace {

// How a tensor that accel cannot represent is named in errors: by its
// layout (Mkldnn, ...).
std::string kindOf(const at::Tensor& tensor) {
  return c10::str(tensor.layout());
}

} // namespace

// --- Arguments ----------------------------------------------------------------

at::Tensor TargetCall::mapTensorOfKind(c10::MaybeOwned<at::Tensor> accel, bool is_mutable) {
  if (isSparse(*accel) || accel->is_nested()) {
    return mapComposed(std::move(accel), is_mutable);
  }
  TORCH_CHECK_NOT_IMPLEMENTED(
      accel->layout() == at::kStrided,
      "The operator '",
      facts_.name,
      "' got an accel tensor of kind ",
      kindOf(*accel),
      "; accel supports strided, quantized, sparse and nested tensors");
  return mapQuantized(std::move(accel), is_mutable);
}

at::Tensor TargetCall::mapQuantized(c10::MaybeOwned<at::Tensor> accel, bool is_mutable) {
  noteDevice(accel->device().index());
  // The target quantizer's per-channel scales and zero points are mapped as
  // arguments of their own, before the tensor's memory (mapping them adds
  // to the arguments that the memory's lookup searches).
  at::QuantizerPtr quantizer = targetQuantizer(quantizerOf(*accel));
  const c10::StorageImpl* accel_storage = accel->storage().unsafeGetStorageImpl();
  at::Tensor target = quantizedTarget(targetOverMemory(*accel, accel_storage), std::move(quantizer));
  addInput(std::move(accel), target, accel_storage, is_mutable);
  return target;
}

at::Tensor TargetCall::mapComposed(c10::MaybeOwned<at::Tensor> accel, bool is_mutable) {
  noteDevice(accel->device().index());
  // Its parts are arguments of their own: results that are (views of) them
  // map back to them, and kernels that write to a written tensor's parts in
  // place (or resize them) write to the accel parts.
  const auto map_part = [&](const at::Tensor& part) {
    return mapTensor(c10::MaybeOwned<at::Tensor>::owned(at::Tensor(part)), is_mutable);
  };
  at::Tensor target =
      accel->is_nested() ? nestedOver(map_part(bufferOf(*accel)), *accel) : sparseTarget(*accel, map_part);
  mirrorRequiresGrad(*accel, target);
  inputs_.emplace_back(std::move(accel), target, nullptr, nullptr, is_mutable);
  any_mutable_ |= is_mutable;
  any_composed_ = true;
  return target;
}

at::QuantizerPtr TargetCall::targetQuantizer(at::QuantizerPtr accel) {
  for (const auto& [target, known] : quantizers_) {
    if (known == accel) {
      return target;
    }
  }
  at::QuantizerPtr target = mapQuantizer(accel, [&](const at::Tensor& part) {
    return mapTensor(c10::MaybeOwned<at::Tensor>::owned(at::Tensor(part)), /*is_mutable=*/false);
  });
  quantizers_.emplace_back(target, std::move(accel));
  return target;
}

// --- Results ------------------------------------------------------------------

void TargetCall::syncQuantizer(const MappedTensor& mapped) {
  // copy_ gives its destination the source's quantizer, set_quantizer_ any.
  at::QuantizerPtr quantizer = accelQuantizer(quantizerOf(mapped.target));
  if (quantizer != quantizerOf(*mapped.accel)) {
    at::get_qtensorimpl(*mapped.accel)->set_quantizer_(std::move(quantizer));
  }
}

void TargetCall::syncComposed() {
  for (auto& mapped : inputs_) {
    if (mapped.mutable_ && isSparse(*mapped.accel)) {
      // New parts are results that only this tensor holds.
      forEachPart(mapped.target, [&](const at::Tensor& part) { countResult(part); });
      syncSparse(*mapped.accel, mapped.target, [&](const at::Tensor& part) { return mapResult(part); });
    }
  }
}

void TargetCall::countParts(const at::Tensor& sparse) {
  forEachPart(sparse, [&](const at::Tensor& part) { countResult(part); });
}

bool TargetCall::partAliasesAnArgument(const at::Tensor& sparse) const {
  bool aliases = false;
  forEachPart(sparse, [&](const at::Tensor& part) { aliases |= aliasesAnArgument(part); });
  return aliases;
}

at::Tensor TargetCall::mapResultOfKind(const at::Tensor& result) {
  if (isSparse(result)) {
    return sparseAccel(result, device_, [&](const at::Tensor& part) { return mapResult(part); });
  }
  if (result.is_nested()) {
    // The buffer is a result (a view of an argument, or memory to adopt)
    // that holds the storage too.
    at::Tensor buffer = bufferOf(result);
    countResult(buffer);
    return nestedOver(mapResult(buffer), result);
  }
  TORCH_CHECK_NOT_IMPLEMENTED(
      result.layout() == at::kStrided && result.has_storage(),
      "The operator '",
      facts_.name,
      "' is not implemented for the accel device: on its target device (",
      c10::DeviceTypeName(runtime().targetType(), /*lower_case=*/true),
      ") it returns a tensor of kind ",
      kindOf(result),
      ", which accel does not support (accel tensors are strided, quantized, sparse or nested)");
  // Strided with storage and of another kind: quantized.
  if (const MappedTensor* base = argumentViewedBy(result)) {
    return quantizedAccel(
        c10::Storage(base->accel->storage()),
        result,
        accelQuantizer(quantizerOf(result)),
        viewKeys(*base->accel, /*quantized=*/true),
        /*is_view=*/true);
  }
  return quantizedAccel(
      adoptStorage(result.storage()), result, accelQuantizer(quantizerOf(result)), {}, /*is_view=*/false);
}

at::QuantizerPtr TargetCall::accelQuantizer(const at::QuantizerPtr& target) {
  for (const auto& [known, accel] : quantizers_) {
    if (known == target) {
      return accel;
    }
  }
  at::QuantizerPtr accel = mapQuantizer(target, [&](const at::Tensor& part) {
    countResult(part);
    return mapResult(part);
  });
  quantizers_.emplace_back(target, accel);
  return accel;
}

} // namespace torch_accel
