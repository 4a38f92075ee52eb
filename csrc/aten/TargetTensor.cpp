#include <csrc/aten/TargetTensor.h>
#include <csrc/core/AccelDevice.h>
#include <csrc/runtime/Runtime.h>

#include <c10/core/AutogradState.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/SmallVector.h>

#include <cstring>
#include <optional>

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

// SizesAndStrides keeps up to five dimensions inline and leaves the slots
// past dim() as they were when a tensor loses dimensions, where a new
// TensorImpl holds zeros (and size 0, stride 1 in the first slot of a 0-dim
// one). ATen reads past dim() in places (linalg_vector_norm reads sizes()[0]
// of a 0-dim tensor), so a target view holds there what the accel tensor
// holds, as the target's kernel would read on a tensor of its own device that
// went through the same calls: whether `impl`'s inline slots past `dim` are
// `source`'s.
bool hasInlineSlotsPastDimOf(c10::TensorImpl* impl, const c10::TensorImpl* source, size_t dim) {
  const c10::impl::SizesAndStrides& mine = impl->sizes_and_strides();
  // (TensorImpl has no const accessor of its SizesAndStrides; only read here.)
  const c10::impl::SizesAndStrides& theirs = const_cast<c10::TensorImpl*>(source)->sizes_and_strides();
  if (mine.size() > C10_SIZES_AND_STRIDES_MAX_INLINE_SIZE) {
    return false; // out of line now: its inline slots are not kept
  }
  int64_t differs = 0;
  for (size_t i = dim; i < C10_SIZES_AND_STRIDES_MAX_INLINE_SIZE; ++i) {
    differs |= (mine.sizes_data()[i] ^ theirs.sizes_data()[i]) | (mine.strides_data()[i] ^ theirs.strides_data()[i]);
  }
  return differs == 0;
}

// Gives a target view `source`'s lazy conjugation and negation bits: kernels
// that handle them themselves see them (set only when they differ: setting
// one rebuilds the key set).
at::Tensor withLazyBits(c10::intrusive_ptr<c10::TensorImpl> impl, const c10::TensorImpl* source) {
  if (C10_UNLIKELY(impl->is_conj() != source->is_conj())) {
    impl->_set_conj(source->is_conj());
  }
  if (C10_UNLIKELY(impl->is_neg() != source->is_neg())) {
    impl->_set_neg(source->is_neg());
  }
  return at::Tensor(std::move(impl));
}

// Whether `impl` holds `source`'s sizes, strides and offset already, and the
// same inline slots past dim(): a recycled view often does (operators run on
// tensors of few shapes). Both inline, all five size and five stride slots
// are compared at once, which costs less than comparing the sizes and
// strides and then the slots past them.
bool hasSameInlineMetadata(c10::TensorImpl* impl, const c10::TensorImpl* source) {
  constexpr size_t kInline = C10_SIZES_AND_STRIDES_MAX_INLINE_SIZE;
  const c10::impl::SizesAndStrides& mine = impl->sizes_and_strides();
  const c10::impl::SizesAndStrides& theirs = const_cast<c10::TensorImpl*>(source)->sizes_and_strides();
  return mine.size() == theirs.size() && mine.size() <= kInline && impl->storage_offset() == source->storage_offset() &&
         std::memcmp(mine.sizes_data(), theirs.sizes_data(), kInline * sizeof(int64_t)) == 0 &&
         std::memcmp(mine.strides_data(), theirs.strides_data(), kInline * sizeof(int64_t)) == 0;
}

// Gives a target view `accel`'s sizes, strides, offset and lazy bits.
at::Tensor withViewMetadata(c10::intrusive_ptr<c10::TensorImpl> impl, const at::Tensor& accel) {
  const c10::TensorImpl* source = accel.unsafeGetTensorImpl();
  if (C10_LIKELY(hasSameInlineMetadata(impl.get(), source))) {
    return withLazyBits(std::move(impl), source);
  }
  const c10::IntArrayRef sizes = source->sizes();
  const c10::IntArrayRef strides = source->strides();
  const int64_t storage_offset = source->storage_offset();
  const c10::IntArrayRef view_sizes = impl->sizes();
  if (sizes.size() < C10_SIZES_AND_STRIDES_MAX_INLINE_SIZE &&
      C10_UNLIKELY(!hasInlineSlotsPastDimOf(impl.get(), source, sizes.size()))) {
    // The accel tensor's five inline slots first, then shrunk to its
    // dimensions, which leaves the slots past them (see hasInlineSlotsPastDimOf).
    constexpr size_t kInline = C10_SIZES_AND_STRIDES_MAX_INLINE_SIZE;
    const c10::impl::SizesAndStrides& slots = const_cast<c10::TensorImpl*>(source)->sizes_and_strides();
    impl->set_sizes_and_strides(
        c10::IntArrayRef(slots.sizes_data(), kInline), c10::IntArrayRef(slots.strides_data(), kInline));
    impl->set_sizes_and_strides(sizes, strides, storage_offset);
  } else if (impl->storage_offset() != storage_offset || view_sizes != sizes || impl->strides() != strides) {
    // A recycled view often had these very sizes already (operators run on
    // tensors of few shapes); setting them recomputes the contiguity flags.
    impl->set_sizes_and_strides(sizes, strides, storage_offset);
  }
  return withLazyBits(std::move(impl), source);
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

} // namespace

bool inferenceModeEnabled() {
  // c10::InferenceMode::is_enabled() without its call: target views are
  // made on every operator call.
  return c10::AutogradState::get_tls_state().get_inference_mode();
}

namespace {

// Target views of accel tensors are made and dropped on every operator call,
// and a new one costs three heap objects (TensorImpl, StorageImpl, version
// counter). Views handed back through recycleTarget() that nothing else
// holds wait here, per thread, to be pointed at the next accel tensor.
//
// A recycled view must be indistinguishable from a new one (targetImpl()),
// whatever the kernels that had it did to it. Its state, and where it is
// made a new one's:
//   - sizes, strides, offset, numel, contiguity flags, and the inline slots
//     past dim() (the accel tensor's, in new and recycled views alike):
//     withViewMetadata();
//   - storage (memory, byte count, allocator, resizable), dtype, device:
//     pointTo();
//   - version counter (bumped by kernels that write through the dispatcher,
//     or shared), received_cuda: give();
//   - inference-ness (keys and version counter follow the mode a view is
//     made in): take() hands out only views made in the current mode;
//   - everything else a kernel could set is refused by reusable(): other
//     keys (Python dispatch, named, lazy conjugation and negation, autograd),
//     autograd meta, backend meta, symbolic sizes, a wrapped number, metadata
//     changes forbidden, storage access that throws, a Python object or
//     another reference to the view or its storage (weak ones included), and
//     a storage that owns memory.
// Not checked: a StorageImpl's data-pointer access flags
// (set_throw_on_mutable_data_ptr, set_warn_deprecated_on_mutable_data_ptr),
// which c10 does not let anyone read; only FakeTensor and functionalization
// set them, on storages of tensors they make themselves. The policy bits of
// custom sizes, device and layout change nothing for a plain TensorImpl
// (their Python variants need the Python key, which is refused).
class RecycledViews {
public:
  // `inference_mode`: c10::InferenceMode::is_enabled() if the caller read it
  // already, else null.
  c10::intrusive_ptr<c10::TensorImpl> take(const bool* inference_mode) {
    if (views_.empty()) {
      return {};
    }
    auto impl = std::move(views_.back());
    views_.pop_back();
    const bool inference = inference_mode != nullptr ? *inference_mode : inferenceModeEnabled();
    if (C10_UNLIKELY(impl->is_inference() != inference)) {
      return {}; // made in or out of inference mode, and needed in the other
    }
    return impl;
  }

  size_t size() const {
    return views_.size();
  }

  // Whether a kernel wrote to the view does not matter: what it left in the
  // metadata (a resize's old dimensions in the inline slots included) is
  // replaced by withViewMetadata() before the view stands for a tensor again.
  void give(at::Tensor&& target, bool /*written_to*/) {
    if (views_.size() < kCapacity && reusable(target)) {
      c10::TensorImpl* impl = target.unsafeGetTensorImpl();
      // Kernels that write through the dispatcher bump their arguments'
      // versions (the foreach kernels do).
      if (!impl->is_inference()) {
        const c10::VariableVersion& version = impl->version_counter();
        if (C10_UNLIKELY(!version.enabled() || !version.unique())) {
          impl->set_version_counter(c10::VariableVersion(/*version=*/0)); // a counter of its own
        } else if (C10_UNLIKELY(version.current_version() != 0)) {
          c10::VariableVersion(version).set_version(0); // its own counter, back to 0 in place
        }
      }
      impl->unsafe_storage().unsafeGetStorageImpl()->set_received_cuda(false);
      views_.push_back(target.unsafeReleaseIntrusivePtr());
    }
  }

private:
  static constexpr size_t kCapacity = 16;

  // Only a view that nothing else can observe, and whose state a kernel
  // left as targetImpl() made it (or as give() and pointTo() can restore),
  // may be changed under its owner's feet.
  static bool reusable(const at::Tensor& target) {
    if (!target.defined() || !target.getIntrusivePtr().is_uniquely_owned()) {
      return false;
    }
    c10::TensorImpl* impl = target.unsafeGetTensorImpl();
    // The key set first: it also rules out the lazy conjugation and
    // negation bits, the Python and named keys, and the autograd keys that
    // autograd_meta() goes with.
    const c10::DispatchKeySet keys = impl->key_set();
    const ViewKeys& view_keys = viewKeys();
    if ((keys != view_keys.normal && keys != view_keys.inference) || impl->pyobj_slot()->load_pyobj() ||
        impl->is_wrapped_number() || !impl->allow_tensor_metadata_change() || impl->has_named_tensor_meta() ||
        impl->autograd_meta() || impl->get_backend_meta() != nullptr || impl->has_symbolic_sizes_strides() ||
        !impl->unsafe_storage() || storageAccessThrows(impl)) {
      return false;
    }
    c10::StorageImpl* storage = impl->unsafe_storage().unsafeGetStorageImpl();
    auto owner = c10::intrusive_ptr<c10::StorageImpl>::reclaim(storage);
    const bool unique = owner.is_uniquely_owned();
    owner.release();
    // A storage that owns memory (a kernel resized it) frees it when dropped.
    return unique && storage->pyobj_slot()->load_pyobj() == nullptr &&
           storage->_mutable_data_ptr_no_checks().get_deleter() == &c10::detail::deleteNothing;
  }

  // Whether the view is marked as one whose storage must not be accessed
  // (TensorImpl::set_storage_access_should_throw, which has no getter). A
  // plain TensorImpl's storage(), called without the virtual call.
  static bool storageAccessThrows(const c10::TensorImpl* impl) {
    try {
      (void)impl->c10::TensorImpl::storage();
      return false;
    } catch (const c10::Error&) {
      return true;
    }
  }

  // The keys of every view targetImpl() makes, out of and in inference mode.
  struct ViewKeys {
    c10::DispatchKeySet normal = newViewKeys(/*inference=*/false);
    c10::DispatchKeySet inference = newViewKeys(/*inference=*/true);
  };
  static const ViewKeys& viewKeys() {
    static const ViewKeys keys;
    return keys;
  }

  static c10::DispatchKeySet newViewKeys(bool inference) {
    std::optional<c10::InferenceMode> mode;
    if (inference) {
      mode.emplace();
    }
    return targetImpl(c10::DataPtr(nullptr, targetDevice(0)), 0, caffe2::TypeMeta::Make<uint8_t>())->key_set();
  }

  c10::SmallVector<c10::intrusive_ptr<c10::TensorImpl>, kCapacity> views_;
};

// The calling thread's views, reached through a plain pointer: a
// thread_local object with a constructor or destructor is reached through
// an initialisation guard and more than one TLS lookup at each use, and the
// pool is used twice per view on every operator call. The pool itself is
// made at a thread's first use and destroyed at its exit, after which that
// thread recycles nothing (its destructors may still run operators).
thread_local RecycledViews* threadViews = nullptr;
thread_local bool threadViewsDestroyed = false;

C10_NOINLINE RecycledViews* newThreadViews() {
  if (threadViewsDestroyed) {
    return nullptr;
  }
  struct Owner {
    RecycledViews views;
    ~Owner() {
      threadViews = nullptr;
      threadViewsDestroyed = true;
    }
  };
  static thread_local Owner owner;
  threadViews = &owner.views;
  return threadViews;
}

// The calling thread's views; null once the thread is exiting.
RecycledViews* recycledViews() {
  RecycledViews* views = threadViews;
  return C10_LIKELY(views != nullptr) ? views : newThreadViews();
}

// Points a recycled view at `nbytes` at `data`, as targetImpl() would make it.
void pointTo(c10::TensorImpl* impl, c10::DataPtr data, size_t nbytes, caffe2::TypeMeta dtype, bool resizable) {
  c10::StorageImpl* storage = impl->unsafe_storage().unsafeGetStorageImpl();
  // The view reports its storage's device (set_storage_and_dtype keeps the
  // two together), so comparing the memory's devices is enough.
  const bool same_device = storage->device() == data.device();
  storage->set_data_ptr_noswap(std::move(data));
  storage->set_nbytes(nbytes);
  storage->set_allocator(resizable ? targetAllocator() : nullptr);
  storage->set_resizable(resizable);
  if (impl->dtype() != dtype || !same_device) {
    // Also refreshes the device the TensorImpl reports from its storage's.
    impl->set_storage_and_dtype(impl->unsafe_storage(), dtype);
  }
}

// `recycle`: whether a recycled view may stand for `accel` (one that keeps
// the accel storage alive never is one); `inference_mode`: see take().
at::Tensor targetOver(
    const at::Tensor& accel, bool resizable, bool keep_alive, bool recycle, const bool* inference_mode = nullptr) {
  const c10::Device accel_device = accel.device();
  TORCH_INTERNAL_ASSERT(accel_device.type() == kAccel);
  // Every operator and copy hands accel memory to target kernels here: in a
  // process forked after initialisation that memory is not this process's.
  checkNotInBadFork();
  const c10::Storage& storage = accel.storage();
  const c10::DeviceIndex device = accel_device.index();
  // Kernels may resize an argument's storage only where the accel storage
  // itself may be resized: one received from another process, or handed out
  // by a graph, raises the target's "Trying to resize storage that is not
  // resizable", as cuda's do.
  resizable = resizable && storage.resizable();
  auto data = keep_alive ? retainingData(storage, device) : borrowedData(const_cast<void*>(storage.data()), device);
  RecycledViews* views = recycle && !keep_alive ? recycledViews() : nullptr;
  auto impl = views != nullptr ? views->take(inference_mode) : c10::intrusive_ptr<c10::TensorImpl>();
  if (impl) {
    pointTo(impl.get(), std::move(data), storage.nbytes(), accel.dtype(), resizable);
    return withViewMetadata(std::move(impl), accel);
  }
  return withViewMetadata(targetImpl(std::move(data), storage.nbytes(), accel.dtype(), resizable), accel);
}

} // namespace

at::Tensor toTarget(const at::Tensor& accel) {
  return targetOver(accel, /*resizable=*/false, /*keep_alive=*/false, /*recycle=*/true);
}

at::Tensor toResizableTarget(const at::Tensor& accel) {
  return targetOver(accel, /*resizable=*/true, /*keep_alive=*/false, /*recycle=*/true);
}

at::Tensor toResizableTarget(const at::Tensor& accel, bool inference_mode) {
  return targetOver(accel, /*resizable=*/true, /*keep_alive=*/false, /*recycle=*/true, &inference_mode);
}

at::Tensor toNewResizableTarget(const at::Tensor& accel) {
  return targetOver(accel, /*resizable=*/true, /*keep_alive=*/false, /*recycle=*/false);
}

bool hasRecycledTarget() {
  const RecycledViews* views = recycledViews();
  return views != nullptr && views->size() > 0;
}

at::Tensor toTargetSharingStorage(const at::Tensor& accel, const at::Tensor& same_storage) {
  TORCH_INTERNAL_ASSERT(accel.device().type() == kAccel);
  TORCH_INTERNAL_ASSERT(same_storage.storage().data() == accel.storage().data());
  return withViewMetadata(targetImpl(same_storage.storage(), accel.dtype()), accel);
}

at::Tensor toTargetKeepingAlive(const at::Tensor& accel) {
  return targetOver(accel, /*resizable=*/false, /*keep_alive=*/true, /*recycle=*/false);
}

void recycleTarget(at::Tensor&& target, bool written_to) {
  if (RecycledViews* views = recycledViews()) {
    views->give(std::move(target), written_to);
  }
}

at::Tensor toTargetIfAccel(const at::Tensor& tensor) {
  return isAccel(tensor) ? toTarget(tensor) : tensor;
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
