#include <csrc/aten/TargetTensor.h>
#include <csrc/runtime/Runtime.h>

#include <c10/core/TensorImpl.h>
#include <c10/util/SmallVector.h>

namespace torch_accel {
namespace {

// The target's allocator, fixed for the process (as the runtime is).
c10::Allocator* targetAllocator() {
  static c10::Allocator* const allocator = runtime().targetAllocator();
  return allocator;
}

c10::intrusive_ptr<c10::TensorImpl> targetImpl(c10::Storage storage, caffe2::TypeMeta dtype) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(targetDispatchKey()), dtype);
  impl->remove_autograd_key();
  return impl;
}

c10::intrusive_ptr<c10::TensorImpl>
targetImpl(c10::DataPtr data, size_t nbytes, caffe2::TypeMeta dtype, bool resizable = false) {
  return targetImpl(
      c10::Storage(
          c10::Storage::use_byte_size_t(), nbytes, std::move(data), resizable ? targetAllocator() : nullptr, resizable),
      dtype);
}

// Gives a target view `accel`'s sizes, strides, offset and lazy bits.
at::Tensor withViewMetadata(c10::intrusive_ptr<c10::TensorImpl> impl, const at::Tensor& accel) {
  const c10::TensorImpl* source = accel.unsafeGetTensorImpl();
  // A recycled view often had these very sizes already (operators run on
  // tensors of few shapes); setting them recomputes the contiguity flags.
  if (impl->storage_offset() != source->storage_offset() || impl->sizes() != source->sizes() ||
      impl->strides() != source->strides()) {
    impl->set_sizes_and_strides(source->sizes(), source->strides(), source->storage_offset());
  }
  // Kernels that handle lazy conjugation/negation themselves see the bits
  // (set only when they differ: setting one rebuilds the key set).
  if (C10_UNLIKELY(impl->is_conj() != source->is_conj())) {
    impl->_set_conj(source->is_conj());
  }
  if (C10_UNLIKELY(impl->is_neg() != source->is_neg())) {
    impl->_set_neg(source->is_neg());
  }
  return at::Tensor(std::move(impl));
}

// The DataPtr of a target tensor that owns nothing.
c10::DataPtr borrowedData(void* data, c10::DeviceIndex device) {
  return c10::DataPtr(data, targetDevice(device));
}

void releaseStorage(void* storage) {
  c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(storage));
}

// The DataPtr of a target tensor that holds a reference to `storage`.
c10::DataPtr retainingData(const c10::Storage& storage, c10::DeviceIndex device) {
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  c10::raw::intrusive_ptr::incref(impl);
  return c10::DataPtr(const_cast<void*>(storage.data()), impl, &releaseStorage, targetDevice(device));
}

// Target views of accel tensors are made and dropped on every operator call,
// and a new one costs three heap objects (TensorImpl, StorageImpl, version
// counter). Views handed back through recycleTarget() that nothing else
// holds wait here, per thread, to be pointed at the next accel tensor.
class RecycledViews {
public:
  c10::intrusive_ptr<c10::TensorImpl> take() {
    if (views_.empty()) {
      return {};
    }
    auto impl = std::move(views_.back());
    views_.pop_back();
    return impl;
  }

  void give(at::Tensor&& target) {
    if (views_.size() < kCapacity && reusable(target)) {
      views_.push_back(target.unsafeReleaseIntrusivePtr());
    }
  }

private:
  static constexpr size_t kCapacity = 16;

  // Only a view that nothing else can observe, and whose state a kernel
  // left as targetImpl() made it, may be changed under its owner's feet.
  static bool reusable(const at::Tensor& target) {
    if (!target.defined() || !target.getIntrusivePtr().is_uniquely_owned()) {
      return false;
    }
    const c10::TensorImpl* impl = target.unsafeGetTensorImpl();
    // The key set first: it also rules out the lazy conjugation and
    // negation bits, and the autograd keys that autograd_meta() goes with.
    if (impl->key_set() != viewKeys() || impl->pyobj_slot()->load_pyobj() || impl->is_wrapped_number() ||
        !impl->allow_tensor_metadata_change() || impl->has_named_tensor_meta() || impl->autograd_meta() ||
        impl->has_symbolic_sizes_strides() || !impl->unsafe_storage()) {
      return false;
    }
    c10::StorageImpl* storage = impl->unsafe_storage().unsafeGetStorageImpl();
    auto owner = c10::intrusive_ptr<c10::StorageImpl>::reclaim(storage);
    const bool unique = owner.is_uniquely_owned();
    owner.release();
    // A storage that owns memory (a kernel resized it) frees it when dropped.
    return unique && storage->pyobj_slot()->load_pyobj() == nullptr &&
           storage->data_ptr().get_deleter() == &c10::detail::deleteNothing;
  }

  // The keys of every view targetImpl() makes.
  static c10::DispatchKeySet viewKeys() {
    static const c10::DispatchKeySet keys =
        targetImpl(c10::DataPtr(nullptr, targetDevice(0)), 0, caffe2::TypeMeta::Make<uint8_t>())->key_set();
    return keys;
  }

  c10::SmallVector<c10::intrusive_ptr<c10::TensorImpl>, kCapacity> views_;
};

thread_local RecycledViews recycledViews;

// A target TensorImpl over `nbytes` at `data`: a recycled one when there is
// one, else a new one.
c10::intrusive_ptr<c10::TensorImpl>
viewImpl(c10::DataPtr data, size_t nbytes, caffe2::TypeMeta dtype, bool resizable, bool may_recycle) {
  auto impl = may_recycle ? recycledViews.take() : c10::intrusive_ptr<c10::TensorImpl>();
  if (!impl) {
    return targetImpl(std::move(data), nbytes, dtype, resizable);
  }
  c10::StorageImpl* storage = impl->unsafe_storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(std::move(data));
  storage->set_nbytes(nbytes);
  storage->set_allocator(resizable ? targetAllocator() : nullptr);
  storage->set_resizable(resizable);
  if (impl->dtype() != dtype || impl->device() != storage->device()) {
    // Also refreshes the device the TensorImpl reports from its storage's.
    impl->set_storage_and_dtype(impl->storage(), dtype);
  }
  return impl;
}

at::Tensor targetOver(const at::Tensor& accel, bool resizable, bool keep_alive) {
  TORCH_INTERNAL_ASSERT(accel.device().type() == c10::DeviceType::PrivateUse1);
  // Every operator and copy hands accel memory to target kernels here: in a
  // process forked after initialisation that memory is not this process's.
  checkNotInBadFork();
  const c10::Storage& storage = accel.storage();
  const c10::DeviceIndex device = accel.device().index();
  auto data = keep_alive ? retainingData(storage, device) : borrowedData(const_cast<void*>(storage.data()), device);
  return withViewMetadata(
      viewImpl(std::move(data), storage.nbytes(), accel.dtype(), resizable, /*may_recycle=*/!keep_alive), accel);
}

} // namespace

at::Tensor toTarget(const at::Tensor& accel) {
  return targetOver(accel, /*resizable=*/false, /*keep_alive=*/false);
}

at::Tensor toResizableTarget(const at::Tensor& accel) {
  return targetOver(accel, /*resizable=*/true, /*keep_alive=*/false);
}

at::Tensor toTargetSharingStorage(const at::Tensor& accel, const at::Tensor& same_storage) {
  TORCH_INTERNAL_ASSERT(accel.device().type() == c10::DeviceType::PrivateUse1);
  TORCH_INTERNAL_ASSERT(same_storage.storage().data() == accel.storage().data());
  return withViewMetadata(targetImpl(same_storage.storage(), accel.dtype()), accel);
}

at::Tensor toTargetKeepingAlive(const at::Tensor& accel) {
  return targetOver(accel, /*resizable=*/false, /*keep_alive=*/true);
}

void recycleTarget(at::Tensor&& target) {
  recycledViews.give(std::move(target));
}

at::Tensor toTargetIfAccel(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().type() == c10::DeviceType::PrivateUse1 ? toTarget(tensor) : tensor;
}

c10::DispatchKey targetDispatchKey() {
  static const c10::DispatchKey key = c10::computeDispatchKey(std::nullopt, at::kStrided, targetDevice(0));
  return key;
}

c10::DispatchKey targetDispatchKey(c10::DispatchKey functionality) {
  return c10::toRuntimePerBackendFunctionalityKey(functionality, c10::toBackendComponent(targetDispatchKey()));
}

at::Tensor targetBytes(void* data, size_t nbytes, c10::DeviceIndex device) {
  checkNotInBadFork();
  auto impl = targetImpl(borrowedData(data, device), nbytes, caffe2::TypeMeta::Make<uint8_t>());
  impl->set_sizes_contiguous({static_cast<int64_t>(nbytes)});
  return at::Tensor(std::move(impl));
}

} // namespace torch_accel
