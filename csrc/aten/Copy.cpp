// Copies between accel and any other device, and between accel devices.
//
// Accel tensors are seen as target tensors over the same memory and the
// target's own copy_ does the work: dtype conversion, broadcasting,
// non-contiguous layouts, pinned-memory and non_blocking semantics, peer
// copies between devices and stream ordering (on the current stream, which
// on the CUDA runtime is the current accel stream) are all the target's.

#include <csrc/aten/QuantizedTargetTensor.h>
#include <csrc/aten/TargetTensor.h>
#include <csrc/core/AccelDevice.h>
#include <csrc/graphs/GraphCapture.h>
#include <csrc/profiler/DeviceActivity.h>
#include <csrc/runtime/AccelTrace.h>
#include <csrc/runtime/FaultInjection.h>
#include <csrc/runtime/Runtime.h>

#include <ATen/ATen.h>
#include <ATen/ops/copy_native.h>
#include <ATen/quantized/QTensorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/MaybeOwned.h>
#include <torch/library.h>

#include <cstring>
#include <string>

namespace torch_accel {
namespace {

// A quantized accel tensor's target view is quantized too (`target`: its
// plain target view), with the same quantizer (per-channel scales seen on
// the target).
at::Tensor withQuantizerOf(const at::Tensor& accel, at::Tensor target) {
  if (!accel.is_quantized()) {
    return target;
  }
  return quantizedTarget(target, mapQuantizer(quantizerOf(accel), [](const at::Tensor& part) {
                           return isAccel(part) ? toTarget(part) : part;
                         }));
}

// The target view of an accel tensor, or any other tensor itself (borrowed:
// copying a tensor that Python holds would take the GIL).
c10::MaybeOwned<at::Tensor> targetIfAccel(const at::Tensor& tensor) {
  return isAccel(tensor) ? c10::MaybeOwned<at::Tensor>::owned(withQuantizerOf(tensor, toTarget(tensor)))
                         : c10::MaybeOwned<at::Tensor>::borrowed(tensor);
}

// A quantized copy gives its destination the source's quantizer (ATen's
// copy_); `before`: the target destination's quantizer before the copy. The
// destination takes the accel quantizer that the new one stands for: an
// accel source's own, never its target view's.
void syncQuantizer(
    const at::Tensor& dst,
    const at::Tensor& target_dst,
    const at::QuantizerPtr& before,
    const at::Tensor& src,
    const at::Tensor& target_src) {
  at::QuantizerPtr now = quantizerOf(target_dst);
  if (now == before) {
    return;
  }
  if (isAccel(src) && src.is_quantized() && now == quantizerOf(target_src)) {
    now = quantizerOf(src);
  }
  at::get_qtensorimpl(dst)->set_quantizer_(std::move(now));
}

// Below this many bytes, setting up the target's copy_ (a TensorIterator)
// costs more than copying; above it, ATen's copy_ is as fast as a memcpy,
// and splits large copies between threads.
constexpr size_t kSmallCopyBytes = 2048;

// Whether the target's copy_ from `src` to `dst` is a small plain copy of
// bytes between two host (CPU) tensors: same dtype and sizes, both
// contiguous, no lazy bits to resolve, and memory that does not overlap
// (ATen's copy_ checks overlaps and does nothing for the same data). On the
// host runtime these are the small contiguous copies of one dtype between
// accel and cpu (the host-to-device copy of torch.tensor(list,
// device="accel") among them). Dtype conversions, broadcasts, strided
// layouts, large copies and every copy with a CUDA tensor go to the
// target's copy_, and so does bool: ATen's CPU copy of bool writes 0 or 1
// for every byte it reads (a bool tensor viewed from other bytes holds others).
bool isSmallPlainHostCopy(const at::Tensor& dst, const at::Tensor& src) {
  const c10::TensorImpl* d = dst.unsafeGetTensorImpl();
  const c10::TensorImpl* s = src.unsafeGetTensorImpl();
  // The key sets of two plain strided CPU tensors (no quantized, sparse,
  // conjugate, negative, ... functionality), autograd keys aside.
  constexpr auto plain = c10::DispatchKeySet(c10::DispatchKey::CPU);
  const auto functionality = [](const c10::TensorImpl* t) {
    return t->key_set() - c10::autograd_dispatch_keyset_with_ADInplaceOrView - c10::autocast_dispatch_keyset;
  };
  if (functionality(d) != plain || functionality(s) != plain || d->dtype() != s->dtype() ||
      d->dtype() == caffe2::TypeMeta::Make<bool>() || d->has_symbolic_sizes_strides() ||
      s->has_symbolic_sizes_strides() || d->sizes() != s->sizes() || !d->is_contiguous() || !s->is_contiguous() ||
      !d->unsafe_storage() || !s->unsafe_storage()) {
    return false;
  }
  const size_t nbytes = d->numel() * d->itemsize();
  if (nbytes == 0 || nbytes > kSmallCopyBytes) {
    return false;
  }
  const char* d_data = static_cast<const char*>(d->unsafe_storage().data()) + d->storage_offset() * d->itemsize();
  const char* s_data = static_cast<const char*>(s->unsafe_storage().data()) + s->storage_offset() * s->itemsize();
  return d_data != nullptr && s_data != nullptr && (d_data + nbytes <= s_data || s_data + nbytes <= d_data);
}

void copyOnTarget(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
  if (C10_UNLIKELY(anyCaptureRecording()) && recordCopyIfCapturing(dst, src, non_blocking, &copyOnTarget)) {
    return; // the capture replays the copy (see GraphCapture.h)
  }
  // The copy is an accel kernel in profiler traces (see DeviceActivity.h).
  static const std::string kCopy = "aten::copy_";
  const auto& accel = isAccel(dst) ? dst : src;
  if (C10_UNLIKELY(copyFaultsArmed())) {
    runtime().checkCopyFault(accel.device().index()); // docs/fault-injection.md
  }
  RecordDeviceActivity kernel(kCopy, accel.device().index());
  auto target_dst = targetIfAccel(dst);
  // Views of one accel storage are views of one target storage, so that the
  // target's copy_ sees an overlap (an error) or the same data (nothing to do).
  auto target_src =
      isAccel(dst) && isAccel(src) && dst.storage().is_alias_of(src.storage())
          ? c10::MaybeOwned<at::Tensor>::owned(withQuantizerOf(src, toTargetSharingStorage(src, *target_dst)))
          : targetIfAccel(src);
  const at::QuantizerPtr quantizer_before = dst.is_quantized() ? quantizerOf(*target_dst) : nullptr;
  if (isSmallPlainHostCopy(*target_dst, *target_src)) {
    std::memcpy(target_dst->mutable_data_ptr(), target_src->const_data_ptr(), target_dst->nbytes());
  } else {
    target_dst->copy_(*target_src, non_blocking);
  }
  if (quantizer_before) {
    syncQuantizer(dst, *target_dst, quantizer_before, src, *target_src);
  }
  // The next copy or operator call can reuse the views.
  if (isAccel(dst)) {
    recycleTarget(*std::move(target_dst));
  }
  if (isAccel(src)) {
    recycleTarget(*std::move(target_src));
  }
  // A blocking copy between accel and the host returns once the current
  // stream's work is done, as CUDA's synchronises the stream: the GPU trace
  // hears of that synchronisation (AccelTrace.h), as of CUDA's.
  if (C10_UNLIKELY(trace::listener() != nullptr) && !non_blocking && (dst.is_cpu() || src.is_cpu())) {
    trace::streamSynchronized(c10::impl::getDeviceGuardImpl(kAccel)->getStream(accel.device()));
  }
}

// Tensor.copy_ with an accel tensor on either side. ATen's composite copy_
// would get here too, through its checks and _copy_from; this is the same
// copy without that detour (and without _copy_from's result by value).
at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  if (self.has_names() || src.has_names()) {
    return at::native::copy_(self, src, non_blocking); // name inference is ATen's
  }
  TORCH_CHECK(self.defined(), "self is undefined");
  TORCH_CHECK(src.defined(), "src is undefined");
  // A zero tensor has no memory to view (ATen's copy_ rules).
  TORCH_CHECK(
      !self._is_zerotensor(),
      "ZeroTensors are immutable. Please materialize the tensor using `.clone()`, if you want a mutable zero tensor.");
  if (src._is_zerotensor()) {
    return self.zero_();
  }
  if (!self.is_same(src)) {
    copyOnTarget(self, src, non_blocking);
  }
  return self;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  copyOnTarget(dst, self, non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, /*non_blocking=*/false);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("copy_", TORCH_FN(copy_));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
}

// A quantized tensor on either side (quantizing, or between quantized
// tensors): the target's copy_ on the quantized target views.
TORCH_LIBRARY_IMPL(aten, QuantizedPrivateUse1, m) {
  m.impl("copy_", TORCH_FN(copy_));
}

// copy_ leaves lazily conjugated or negated sources to the kernel that does
// the copying, and so do these: the target's copy_ resolves the bits (target
// views carry them). Without this, the conjugate/negative fallbacks would
// resolve a source by cloning it, which copies through _copy_from again,
// forever. Only out-of-tree backends reach _copy_from, so CPU and CUDA
// copies are unaffected.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

} // namespace
} // namespace torch_accel
