// The dense path of an operator call: plain strided arguments and results.
// Every tensor of another kind (quantized, sparse, nested, or one accel
// lacks) goes through the seam of TargetCall.h to TargetCallKinds.cpp.

#include <csrc/aten/SparseTargetTensor.h>
#include <csrc/aten/TargetCall.h>
#include <csrc/aten/TargetTensor.h>
#include <csrc/core/AccelDevice.h>

#include <ATen/EmptyTensor.h>
#include <c10/core/TensorImpl.h>

#include <algorithm>
#include <atomic>
#include <string_view>

namespace torch_accel {
namespace {

std::atomic<uint64_t> callCount{0};

// Operators whose CUDA kernels take index tensors on the CPU and move them
// themselves (ATen's AdvancedIndex): CUDA accepts them in the `indices`
// argument (number 1 of each), so accel does too. Their other arguments
// follow the general rule (a non-scalar CPU `values` is refused).
int cpuIndexArgument(const c10::OperatorName& name) {
  static const std::string_view ops[] = {
      "aten::index",
      "aten::index_put",
      "aten::index_put_",
      "aten::_index_put_impl_",
      "aten::_unsafe_index",
      "aten::_unsafe_index_put",
  };
  for (const auto op : ops) {
    if (name.name == op) {
      return 1;
    }
  }
  return -1;
}

// Operators that CUDA lets take CPU tensors in any argument: factories that
// take a CPU tensor as a template (its quantizer) for a result on another
// device, and copies between devices of the tensor kinds whose copies are
// the target's kernels (sparse and nested tensors; strided and quantized
// copies are accel kernels and never reach the fallback).
bool acceptsCpuTensors(const c10::OperatorName& name) {
  static const std::string_view ops[] = {
      "aten::empty_quantized",
      "aten::_empty_per_channel_affine_quantized",
      "aten::copy_",
      "aten::copy_sparse_to_sparse_",
      "aten::_to_copy",
  };
  for (const auto op : ops) {
    if (name.name == op) {
      return true;
    }
  }
  return false;
}

bool isOptionalGenerator(const c10::Argument& argument) {
  const auto optional = argument.type()->cast<c10::OptionalType>();
  return optional && optional->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

c10::DeviceIndex currentDevice() {
  return c10::impl::getDeviceGuardImpl(kAccel)->getDevice().index();
}

at::Tensor withMetadataOf(const at::Tensor& like, c10::intrusive_ptr<c10::TensorImpl> impl) {
  impl->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  impl->_set_conj(like.is_conj());
  impl->_set_neg(like.is_neg());
  return at::Tensor(std::move(impl));
}

bool hasWeakReferences(c10::StorageImpl* storage) {
  auto owner = c10::intrusive_ptr<c10::StorageImpl>::reclaim(storage);
  const bool weak = owner.weak_use_count() > 1; // 1: the strong references' own
  owner.release();
  return weak;
}

// The keys of a target TensorImpl as its constructor makes them, out of and
// in inference mode (an inference tensor has no autograd keys).
c10::DispatchKeySet constructedTargetKeys(bool inference) {
  const c10::BackendComponent backend = c10::toBackendComponent(targetDispatchKey());
  const auto keys = c10::DispatchKeySet(targetDispatchKey()) | c10::getAutocastRelatedKeySetFromBackend(backend);
  return inference ? keys : keys | c10::getAutogradRelatedKeySetFromBackend(backend);
}

// Whether `result`, a strided target tensor over memory that the call has
// adopted, is a tensor that its kernel made and that only the caller's
// reference holds: no Python object, no weak references, no other views,
// and nothing set on it that a fresh accel TensorImpl would not have.
// Such a tensor can change hands as its memory does (see mapResult).
bool isFreshTargetTensor(const at::Tensor& result) {
  static const c10::DispatchKeySet keys = constructedTargetKeys(/*inference=*/false);
  static const c10::DispatchKeySet inference_keys = constructedTargetKeys(/*inference=*/true);
  c10::TensorImpl* impl = result.unsafeGetTensorImpl();
  const c10::DispatchKeySet result_keys = impl->key_set();
  if (result_keys != keys && result_keys != inference_keys) {
    return false; // a subclass, a wrapped or lazily conjugated tensor, ...
  }
  return result.use_count() == 1 && result.weak_use_count() == 1 && impl->pyobj_slot()->load_pyobj() == nullptr &&
         !impl->is_wrapped_number() && impl->allow_tensor_metadata_change() && impl->autograd_meta() == nullptr &&
         !impl->has_named_tensor_meta() && !impl->has_symbolic_sizes_strides() &&
         (result_keys == inference_keys || impl->version_counter().current_version() == 0);
}

// Whether `tensor` is of a kind other than plain strided: quantized, sparse,
// nested, or of a layout accel lacks (tests of its dispatch keys, as every
// argument and result of every call is asked).
C10_ALWAYS_INLINE bool isOfAnotherKind(const at::Tensor& tensor) {
  return tensor.is_quantized() || isSparse(tensor) || tensor.is_nested() || tensor.layout() != at::kStrided;
}

c10::Storage accelStorage(c10::DataPtr data, size_t nbytes) {
  return c10::Storage(
      c10::Storage::use_byte_size_t(), nbytes, std::move(data), runtime().allocator(), /*resizable=*/true);
}

} // namespace

OperatorFacts::OperatorFacts(const c10::OperatorHandle& op) : name(op.operator_name()) {
  bool takes_generator = false;
  for (const auto& argument : op.schema().arguments()) {
    mutable_arguments.push_back(argument.alias_info() != nullptr && argument.alias_info()->isWrite());
    optional_generators.push_back(isOptionalGenerator(argument));
    takes_generator |= optional_generators.back() || argument.type()->kind() == c10::TypeKind::GeneratorType;
  }
  draws_from_default_generator = !takes_generator && op.hasTag(at::Tag::nondeterministic_seeded);
  cpu_index_argument = cpuIndexArgument(name);
  accepts_cpu_tensors = acceptsCpuTensors(name);
  cuda_alert = cudaNondeterministicAlert(name);
}

TargetCall::TargetCall(const c10::OperatorHandle& op, const OperatorFacts& facts)
    : TargetCall(op, facts, targetDispatchKey()) {}

TargetCall::TargetCall(const c10::OperatorHandle& op, const OperatorFacts& facts, c10::DispatchKey target_key)
    : op_(op), facts_(facts), target_key_(target_key) {
  callCount.fetch_add(1, std::memory_order_relaxed);
}

TargetCall::~TargetCall() {
  // The next operator call can reuse the target views (see recycleTarget).
  // Handed back last to first, so that the next call's first argument gets
  // this call's first view, and so on: an operator called again on tensors
  // of the same shapes then finds each view with its sizes already set.
  for (auto it = inputs_.rbegin(); it != inputs_.rend(); ++it) {
    recycleTarget(std::move(it->target), /*written_to=*/it->mutable_);
  }
}

// --- Arguments ----------------------------------------------------------------

at::Tensor TargetCall::mapTensor(c10::MaybeOwned<at::Tensor> accel, bool is_mutable) {
  // The same accel tensor passed twice (self and out=self) must be the same
  // target tensor, as on the target: kernels treat an output that is also an
  // input differently (in-place broadcasting rules, overlap checks).
  for (auto& mapped : inputs_) {
    if (mapped.accel->unsafeGetTensorImpl() == accel->unsafeGetTensorImpl()) {
      mapped.mutable_ |= is_mutable;
      any_mutable_ |= is_mutable;
      return mapped.target;
    }
  }
  if (C10_UNLIKELY(isOfAnotherKind(*accel))) {
    return mapTensorOfKind(std::move(accel), is_mutable);
  }
  noteDevice(accel->device().index());
  const c10::StorageImpl* accel_storage = accel->storage().unsafeGetStorageImpl();
  at::Tensor target = targetOverMemory(*accel, accel_storage);
  addInput(std::move(accel), target, accel_storage, is_mutable);
  return target;
}

// CUDA's rule for tensors of another device next to device tensors (what
// TensorIterator's device check and the out= checks of structured kernels
// apply): an input may be a CPU scalar (a 0-dim CPU tensor), or a CPU index
// tensor of the index family; every other tensor, and every tensor written
// to (out=, in-place), must be on the call's device. A CPU tensor written to
// would otherwise have the target kernel resize it into accel memory.
void TargetCall::noteOtherTensor(const at::Tensor& tensor, size_t argument) {
  if (tensor.device().is_cpu() && (facts_.accepts_cpu_tensors ||
                                   (!facts_.mutable_arguments[argument] &&
                                    (tensor.dim() == 0 || static_cast<int>(argument) == facts_.cpu_index_argument)))) {
    return;
  }
  if (!foreign_device_.has_value()) {
    foreign_device_ = tensor.device();
  }
}

c10::Device TargetCall::mapDevice(c10::Device device) {
  if (device.type() != kAccel) {
    names_other_device_ = true;
    return device;
  }
  const c10::DeviceIndex index = device.has_index() ? device.index() : currentDevice();
  noteDevice(index);
  return targetDevice(index);
}

at::Generator TargetCall::mapGenerator(const at::Generator& generator) const {
  // As CUDA kernels reject CPU generators, accel kernels reject non-accel ones.
  TORCH_CHECK(
      generator.device().type() == kAccel,
      "Expected a 'accel' device type for generator but found '",
      generator.device().type(),
      "' (when running ",
      facts_.name,
      ")");
  return targetGenerator(generator);
}

void TargetCall::noteDevice(c10::DeviceIndex index) {
  if (device_ < 0) {
    device_ = index;
  } else if (index != device_ && other_accel_device_ < 0) {
    other_accel_device_ = index;
  }
}

// --- Preparing -----------------------------------------------------------------

void TargetCall::prepare() {
  if (device_ < 0) {
    device_ = currentDevice(); // e.g. a factory that takes no device
  }
  checkDevices();
  TORCH_CHECK_NOT_IMPLEMENTED(
      (facts_.always_has_target_kernel && target_key_ == targetDispatchKey()) ||
          op_.hasComputedKernelForDispatchKey(target_key_),
      "The operator '",
      facts_.name,
      "' is not implemented for the accel device: its target device (",
      c10::DeviceTypeName(runtime().targetType(), /*lower_case=*/true),
      ") has no kernel for it",
      target_key_ == targetDispatchKey() ? std::string() : c10::str(" (", target_key_, ")"),
      ".");
}

void TargetCall::checkDevices() const {
  TORCH_CHECK(
      other_accel_device_ < 0,
      "Expected all tensors to be on the same device, but found at least two devices, accel:",
      static_cast<int>(device_),
      " and accel:",
      static_cast<int>(other_accel_device_),
      "! (when running ",
      facts_.name,
      ")");
  // Target kernels cannot tell accel memory from host memory on the host
  // runtime, so the fallback enforces CUDA's rule (see noteOtherTensor) on
  // every runtime. CPU scalar inputs are left to the target kernel: on the
  // CUDA runtime, CUDA's kernel accepts or refuses them as it does for cuda.
  TORCH_CHECK(
      !foreign_device_.has_value(),
      "Expected all tensors to be on the same device, but found at least two devices, accel:",
      static_cast<int>(device_),
      " and ",
      foreign_device_.value_or(c10::Device(kAccel)),
      "! (when running ",
      facts_.name,
      ")");
}

at::Generator TargetCall::defaultGenerator() const {
  return targetGenerator(defaultAccelGenerator(device_));
}

// --- Running -------------------------------------------------------------------

TargetCall::KernelScope::KernelScope(const TargetCall& call)
    : // The target kernel is an accel kernel in profiler traces (see DeviceActivity.h).
      activity_(call.facts_.name.name, call.device_) {
  // Usually the call's device is current already; then there is nothing to
  // switch or restore (kernels leave the current device as they found it).
  if (runtime().getDevice().index() != call.device_) {
    device_guard_.emplace(c10::Device(kAccel, call.device_));
  }
  if (call.facts_.draws_from_default_generator) {
    random_state_.emplace(call.device_);
  }
}

void TargetCall::rethrowKernelError() {
  try {
    syncBack();
  } catch (...) {
    // The kernel's error is the one to report; the arguments keep what could
    // be synced.
  }
  try {
    throw;
  } catch (const c10::OutOfMemoryError& e) {
    throwOutOfMemory(e);
  }
}

void TargetCall::throwOutOfMemory(const c10::OutOfMemoryError& e) const {
  // The target's allocator names the target device; say which accel device it is.
  C10_THROW_ERROR(
      OutOfMemoryError,
      c10::str(
          "accel:",
          static_cast<int>(device_),
          " out of memory while running ",
          facts_.name,
          ": ",
          e.what_without_backtrace()));
}

// --- Results -------------------------------------------------------------------

void TargetCall::syncBack() {
  if (!any_mutable_) {
    return; // nothing was written to (most calls)
  }
  // Target storages whose new memory has moved to their accel storage: views
  // of one storage share it (mapTensor), and it moves once.
  c10::SmallVector<const c10::StorageImpl*, 4> synced;
  for (auto& mapped : inputs_) {
    if (!mapped.mutable_ || mapped.target_storage == nullptr) {
      continue; // tensors made of parts: their parts are synced here, the tensors in syncComposed()
    }
    const bool storage_synced = std::find(synced.begin(), synced.end(), mapped.target_storage) != synced.end();
    if (!storage_synced) {
      synced.push_back(mapped.target_storage);
    }
    syncBack(mapped, /*storage_synced=*/storage_synced);
    if (C10_UNLIKELY(mapped.accel->is_quantized())) {
      syncQuantizer(mapped);
    }
  }
  if (C10_UNLIKELY(any_composed_)) {
    syncComposed();
  }
}

// A mutated argument whose kernel replaced or resized its storage, or
// changed its sizes or strides, passes the change on to the accel tensor.
void TargetCall::syncBack(const MappedTensor& mapped, bool storage_synced) {
  const at::Tensor& accel_tensor = *mapped.accel;
  c10::TensorImpl* accel = accel_tensor.unsafeGetTensorImpl();
  const at::Tensor& target = mapped.target;
  c10::StorageImpl* target_storage = target.storage().unsafeGetStorageImpl();
  if (target_storage != mapped.target_storage) {
    accel->set_storage_keep_dtype(storageForReplacement(target.storage()));
  } else if (
      !storage_synced && (target_storage->data() != accel_tensor.storage().data() ||
                          target_storage->nbytes() != accel_tensor.storage().nbytes())) {
    // Resized into new memory: the accel storage (shared by every view of
    // it) takes the new allocation, as a resize on the target would.
    c10::DataPtr data = target_storage->set_data_ptr(c10::DataPtr(nullptr, target_storage->device()));
    const size_t nbytes = target_storage->nbytes();
    c10::StorageImpl* accel_storage = accel_tensor.storage().unsafeGetStorageImpl();
    if (data.get() == accel_storage->data()) {
      // Same memory, only the byte count changed (a shrink).
      accel_storage->set_nbytes(nbytes);
    } else {
      if (!runtime().adoptTargetAllocation(data, device_)) {
        data = copyToAccel(data.get(), nbytes);
      }
      accel_storage->set_data_ptr_noswap(std::move(data));
      accel_storage->set_nbytes(nbytes);
    }
  }
  if (target.sizes() != accel_tensor.sizes() || target.strides() != accel_tensor.strides() ||
      target.storage_offset() != accel_tensor.storage_offset()) {
    // After a kernel's error, a target resize that could not allocate has
    // left sizes its storage cannot hold (ATen sets them first): the accel
    // tensor keeps its own rather than claim memory it does not have
    // (docs/fault-injection.md).
    if (target.numel() != 0 &&
        at::detail::computeStorageNbytes(target.sizes(), target.strides(), target.itemsize(), target.storage_offset()) >
            accel_tensor.storage().nbytes()) {
      return;
    }
    accel->set_sizes_and_strides(target.sizes(), target.strides(), target.storage_offset());
  }
}

c10::Storage TargetCall::storageForReplacement(const c10::Storage& target) {
  if (target.device_type() == kAccel) {
    return target; // set_ to an accel storage (an argument)
  }
  for (const auto& mapped : inputs_) {
    if (target.unsafeGetStorageImpl() == mapped.target_storage) {
      return mapped.accel->storage();
    }
  }
  return adoptOrCopy(target.unsafeGetStorageImpl());
}

size_t& TargetCall::resultStorageRefs(const c10::StorageImpl* storage) {
  for (auto& [impl, refs] : result_storage_refs_) {
    if (impl == storage) {
      return refs;
    }
  }
  return result_storage_refs_.emplace_back(storage, 0).second;
}

// Results that share one fresh storage (say, two views of one buffer) may
// adopt it only if nothing else holds it.
void TargetCall::countResult(const at::Tensor& result) {
  if (!result.defined()) {
    return;
  }
  if (C10_UNLIKELY(isSparse(result))) {
    countParts(result);
  } else if (result.has_storage()) {
    ++resultStorageRefs(result.storage().unsafeGetStorageImpl());
  }
}

bool TargetCall::aliasesAnArgument(const at::Tensor& result) const {
  if (C10_UNLIKELY(isSparse(result))) {
    return partAliasesAnArgument(result);
  }
  return result.has_storage() && argumentViewedBy(result) != nullptr;
}

c10::DispatchKeySet TargetCall::viewKeys(const at::Tensor& base, bool quantized) {
  // A view keeps its base's keys (autograd, or none for an inference
  // tensor) but not its lazy conjugation or negation bits; a view of the
  // other kind (a plain view of a quantized tensor's memory, or the reverse)
  // swaps the functionality key.
  auto keys = base.key_set().remove(c10::DispatchKey::Conjugate).remove(c10::DispatchKey::Negative);
  if (quantized != base.is_quantized()) {
    keys = quantized ? keys.remove(c10::DispatchKey::Dense).add(c10::DispatchKey::Quantized)
                     : keys.remove(c10::DispatchKey::Quantized).add(c10::DispatchKey::Dense);
  }
  return keys;
}

const at::Tensor* TargetCall::accelOf(const at::Tensor& target) const {
  for (const auto& mapped : inputs_) {
    if (target.unsafeGetTensorImpl() == mapped.target.unsafeGetTensorImpl()) {
      return &*mapped.accel;
    }
  }
  return nullptr;
}

at::Tensor TargetCall::mapResult(const at::Tensor& result) {
  static const c10::DeviceType target_type = runtime().targetType(); // fixed for the process
  if (!result.defined() || result.device().type() != target_type) {
    return result; // e.g. a CPU result of a CUDA kernel
  }
  if (names_other_device_) {
    // Made on the device an argument named (`empty_like(x, device="cpu")`):
    // a tensor of that device, never one over accel memory (a CPU kernel on
    // the host runtime may return its CPU "input" itself).
    return aliasesAnArgument(result) ? result.clone() : result;
  }
  if (const at::Tensor* accel = accelOf(result)) {
    return *accel; // in-place and out= results are the argument
  }
  if (C10_UNLIKELY(isOfAnotherKind(result) || !result.has_storage())) {
    return mapResultOfKind(result);
  }
  if (const MappedTensor* base = argumentViewedBy(result)) {
    return withMetadataOf(
        result,
        c10::make_intrusive<c10::TensorImpl>(
            c10::TensorImpl::VIEW,
            c10::Storage(base->accel->storage()),
            viewKeys(*base->accel, /*quantized=*/false),
            result.dtype()));
  }
  c10::Storage accel_storage = adoptStorage(result.storage());
  if (isFreshTargetTensor(result)) {
    // Nothing but the caller's reference holds this tensor, which the caller
    // drops for the accel one: it becomes the accel tensor itself, with the
    // keys an accel TensorImpl gets from its constructor, which saves making
    // one and destroying the other on nearly every call.
    c10::TensorImpl* impl = result.unsafeGetTensorImpl();
    impl->_change_backend_component_keys(c10::Device(kAccel, device_));
    impl->set_storage_keep_dtype(std::move(accel_storage)); // and its device
    return result;
  }
  // The constructor adds autograd keys (unless in inference mode).
  return withMetadataOf(
      result,
      c10::make_intrusive<c10::TensorImpl>(
          std::move(accel_storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), result.dtype()));
}

c10::Storage TargetCall::adoptStorage(const c10::Storage& target) {
  c10::StorageImpl* impl = target.unsafeGetStorageImpl();
  for (const auto& [target_impl, accel] : adopted_) {
    if (target_impl == impl) {
      return accel;
    }
  }
  c10::Storage accel = adoptOrCopy(impl);
  adopted_.emplace_back(impl, accel);
  return accel;
}

c10::Storage TargetCall::adoptOrCopy(c10::StorageImpl* target) {
  const size_t nbytes = target->nbytes();
  // A result without memory (a ZeroTensor, say) has nothing to adopt or copy.
  TORCH_CHECK_NOT_IMPLEMENTED(
      nbytes == 0 || target->data() != nullptr,
      "The operator '",
      facts_.name,
      "' returned a tensor without memory on its target device (",
      c10::DeviceTypeName(runtime().targetType(), /*lower_case=*/true),
      "); accel cannot take it over");
  // Owned only by this call's results: the allocation can change hands.
  if (c10::raw::intrusive_ptr::use_count(target) == resultStorageRefs(target)) {
    c10::DataPtr data = target->set_data_ptr(c10::DataPtr(nullptr, target->device()));
    if (runtime().adoptTargetAllocation(data, device_)) {
      if (!hasWeakReferences(target)) {
        // No accel tensor can see this storage yet, and the target results
        // that hold it are dropped once mapped: the storage object itself
        // becomes accel's, which saves making a new one.
        target->set_data_ptr_noswap(std::move(data));
        target->set_allocator(runtime().allocator());
        target->set_resizable(true);
        return c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(target));
      }
      return accelStorage(std::move(data), nbytes);
    }
    target->set_data_ptr(std::move(data));
  }
  return accelStorage(copyToAccel(target->data(), nbytes), nbytes);
}

// New accel memory holding a copy of `nbytes` of target memory at `data`.
c10::DataPtr TargetCall::copyToAccel(const void* data, size_t nbytes) const {
  c10::DeviceGuard device_guard(c10::Device(kAccel, device_));
  c10::DataPtr accel = runtime().allocator()->allocate(nbytes);
  if (nbytes > 0) {
    targetBytes(accel.get(), nbytes, device_).copy_(targetBytes(const_cast<void*>(data), nbytes, device_));
  }
  return accel;
}

uint64_t targetCallCount() {
  return callCount.load(std::memory_order_relaxed);
}

} // namespace torch_accel
