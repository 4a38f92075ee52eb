#pragma once

// One operator call that the target's kernel runs for accel (see "The alias
// fallback" in docs/design.md). This is where the fallback's semantics live, for
// both of its entry points: the boxed alias fallback (AliasFallback.cpp,
// every operator) and the unboxed kernels of the hottest operators
// (TargetKernels.cpp), which differ only in how they walk arguments and
// results (IValues on a stack, or typed C++ arguments).
//
// A call goes through its phases in this order:
//
//   1. arguments, in schema order: each accel tensor is replaced by a target
//      view over the same memory, of the same kind (mapTensor; the same view
//      when the same tensor comes twice, views of one storage when tensors
//      share an accel storage, so that overlaps are seen), other tensors are
//      noted for the device check (noteOtherTensor), accel devices and
//      generators become the target's (mapDevice, mapGenerator);
//   2. prepare(): the call's accel device is settled and CUDA's device rules
//      are checked, with errors that name accel (see checkDevices);
//   3. run(kernel): the target kernel runs under the accel device, with the
//      memory target kernels allocate made accel memory, accel's default
//      generator lent to the target when the operator draws from it, as an
//      accel kernel for the profiler, and with out-of-memory errors naming
//      the accel device;
//   4. results: syncBack() moves the new memory and metadata of mutated
//      arguments that the kernel resized back to their accel tensors; then
//      countResult() sees every result tensor, and mapResult() maps each:
//      a target view is its accel argument, a tensor sharing a view's
//      storage is an accel view of the argument, a fresh tensor's memory is
//      adopted as accel memory (or copied when the runtime cannot adopt it).
//
// TargetCall.cpp is the dense path, plain strided tensors, read top to
// bottom; every argument and result of another kind (quantized, sparse,
// nested) crosses one seam (the private "other tensor kinds" functions
// below) to TargetCallKinds.cpp, which maps it with its parts (the
// *TargetTensor.h files).
//
// Accel tensors are never relabelled in place, so their other views stay
// accel tensors; the same kernel runs on the same memory, so results are
// bitwise those of the target device.

#include <csrc/aten/NondeterministicAlerts.h>
#include <csrc/aten/TargetTensor.h>
#include <csrc/profiler/DeviceActivity.h>
#include <csrc/runtime/AccelGenerator.h>
#include <csrc/runtime/Runtime.h>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/quantized/Quantizer.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <c10/util/MaybeOwned.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <optional>
#include <utility>

namespace torch_accel {

// What a call needs to know about an operator's schema, worked out once per
// operator instead of on every call.
struct OperatorFacts {
  c10::OperatorName name;
  c10::SmallVector<bool, 8> mutable_arguments;   // written to: out=, in-place
  c10::SmallVector<bool, 8> optional_generators; // Generator? arguments
  bool draws_from_default_generator = false;     // random, without a generator argument
  // The argument whose tensors CUDA's kernel also takes on the CPU (the
  // indices of index and index_put_), or -1.
  int cpu_index_argument = -1;
  // CUDA's kernel takes CPU tensors in every argument (quantized factories'
  // templates, sparse and nested copies between devices).
  bool accepts_cpu_tensors = false;
  // The alert CUDA's kernel raises in deterministic mode, or nullptr.
  const CudaNondeterministicAlert* cuda_alert = nullptr;
  // The operator has a kernel for the target's strided key whatever else is
  // registered later (an ATen operator that the target implements, as those
  // of the unboxed kernels): calls need not look it up again. False when
  // unknown, as for the fallback's operators, whose kernels may come and go.
  bool always_has_target_kernel = false;

  explicit OperatorFacts(const c10::OperatorHandle& op);
};

class TargetCall {
public:
  // `target_key`: the target's dispatch key whose kernel runs the call, that
  // of the tensors' kind (CPU or CUDA for strided tensors, QuantizedCPU,
  // SparseCUDA, ... for the other kinds: see targetDispatchKey()).
  TargetCall(const c10::OperatorHandle& op, const OperatorFacts& facts);
  TargetCall(const c10::OperatorHandle& op, const OperatorFacts& facts, c10::DispatchKey target_key);
  ~TargetCall();
  TargetCall(const TargetCall&) = delete;
  TargetCall& operator=(const TargetCall&) = delete;

  // --- 1. Arguments --------------------------------------------------------

  // The target view that stands in for the accel tensor `accel`. The call
  // keeps `accel` (borrowed: the caller keeps it alive for the call) and the
  // view until it ends.
  at::Tensor mapTensor(c10::MaybeOwned<at::Tensor> accel, bool is_mutable);

  // A defined tensor that is not an accel tensor, in the operator's argument
  // number `argument` (schema order).
  void noteOtherTensor(const at::Tensor& tensor, size_t argument);

  // An accel device argument's target device (other devices are unchanged).
  c10::Device mapDevice(c10::Device device);

  // An accel generator argument's target generator; other generators are rejected.
  at::Generator mapGenerator(const at::Generator& generator) const;

  // --- 2. ------------------------------------------------------------------

  void prepare();

  // For a Generator? argument left empty: the target generator of the call
  // device's accel default generator (the target kernel would otherwise draw
  // from the target device's default generator). After prepare().
  at::Generator defaultGenerator() const;

  // --- 3. ------------------------------------------------------------------

  // A kernel that fails may already have resized or replaced a mutated
  // argument (resize_output before the kernel's own checks): as on the
  // target, the change stays (syncBack()) and the kernel's error propagates.
  template <class Kernel> decltype(auto) run(Kernel&& kernel) {
    try {
      KernelScope scope(*this);
      return kernel();
    } catch (...) {
      rethrowKernelError();
    }
  }

  // --- 4. Results ----------------------------------------------------------

  void syncBack();
  void countResult(const at::Tensor& result);
  at::Tensor mapResult(const at::Tensor& result);

  c10::DispatchKey targetKey() const {
    return target_key_;
  }

  // The accel tensor whose target view is `target`, or nullptr.
  const at::Tensor* accelOf(const at::Tensor& target) const;

private:
  // One accel tensor argument and the target view standing in for it.
  struct MappedTensor {
    MappedTensor(
        c10::MaybeOwned<at::Tensor>&& accel,
        const at::Tensor& target,
        const c10::StorageImpl* accel_storage,
        c10::StorageImpl* target_storage,
        bool is_mutable)
        : accel(std::move(accel)), target(target), accel_storage(accel_storage), target_storage(target_storage),
          mutable_(is_mutable) {}

    c10::MaybeOwned<at::Tensor> accel;
    at::Tensor target;
    // The accel tensor's storage, looked up once (mapTensor compares every
    // new argument's with those of the arguments before it). Null for a
    // tensor made of parts.
    const c10::StorageImpl* accel_storage;
    // The storage the target view was created with; views of one accel
    // storage share one (see mapTensor). Null for a tensor made of parts
    // (sparse, nested), which are mapped tensors of their own.
    c10::StorageImpl* target_storage;
    bool mutable_;
  };

  // What stays in force while the target kernel runs (see run()).
  class KernelScope {
  public:
    explicit KernelScope(const TargetCall& call);

  private:
    std::optional<c10::DeviceGuard> device_guard_;
    TargetAllocationsAreAccel allocations_;
    RecordDeviceActivity activity_;
    std::optional<TargetDefaultGeneratorAsAccel> random_state_;
  };

  // From a handler of the kernel's exception: syncs back what the kernel
  // changed before failing, then rethrows (out-of-memory errors naming the
  // accel device).
  [[noreturn]] void rethrowKernelError();
  [[noreturn]] void throwOutOfMemory(const c10::OutOfMemoryError& e) const;
  void checkDevices() const;
  void noteDevice(c10::DeviceIndex index);

  // Strided arguments (dense, and the memory of quantized ones): the target
  // view over `accel`'s memory, sharing the target storage of an earlier
  // argument over the same accel storage; and the argument's record.
  at::Tensor targetOverMemory(const at::Tensor& accel, const c10::StorageImpl* accel_storage);
  void addInput(
      c10::MaybeOwned<at::Tensor>&& accel,
      const at::Tensor& target,
      const c10::StorageImpl* accel_storage,
      bool is_mutable);

  // A target view requires grad where its accel tensor does (under grad mode).
  static void mirrorRequiresGrad(const at::Tensor& accel, const at::Tensor& target);

  size_t& resultStorageRefs(const c10::StorageImpl* storage);
  c10::Storage adoptStorage(const c10::Storage& target);
  c10::Storage adoptOrCopy(c10::StorageImpl* target);
  c10::DataPtr copyToAccel(const void* data, size_t nbytes) const;
  void syncBack(const MappedTensor& mapped, bool storage_synced);
  c10::Storage storageForReplacement(const c10::Storage& target);
  bool aliasesAnArgument(const at::Tensor& result) const;
  // The argument whose storage the strided target result `result` is a view
  // of, or nullptr.
  const MappedTensor* argumentViewedBy(const at::Tensor& result) const;
  // The keys of an accel view of `base` (an argument), quantized or not.
  static c10::DispatchKeySet viewKeys(const at::Tensor& base, bool quantized);

  // --- The other tensor kinds (TargetCallKinds.cpp) -------------------------
  //
  // The one seam between the dense path (TargetCall.cpp) and the other
  // kinds: every argument and result that is not a plain strided tensor is
  // handed here, where quantized, sparse and nested tensors map part by
  // part (QuantizedTargetTensor.h, SparseTargetTensor.h,
  // NestedTargetTensor.h) and the kinds accel lacks are refused.

  // mapTensor for a tensor of another kind.
  at::Tensor mapTensorOfKind(c10::MaybeOwned<at::Tensor> accel, bool is_mutable);
  // A quantized argument: the target view of its memory with a target quantizer.
  at::Tensor mapQuantized(c10::MaybeOwned<at::Tensor> accel, bool is_mutable);
  // An accel tensor made of other tensors, its parts (sparse tensors; nested
  // tensors, over a buffer): its target view is a target tensor of the same
  // kind over the target views of its parts.
  at::Tensor mapComposed(c10::MaybeOwned<at::Tensor> accel, bool is_mutable);
  // syncBack's part for a mutated quantized argument: the quantizer the kernel gave it.
  void syncQuantizer(const MappedTensor& mapped);
  // syncBack's part for mutated tensors made of parts: their new parts.
  void syncComposed();
  // countResult and aliasesAnArgument for a sparse result: its parts.
  void countParts(const at::Tensor& sparse);
  bool partAliasesAnArgument(const at::Tensor& sparse) const;
  // mapResult for a result of another kind.
  at::Tensor mapResultOfKind(const at::Tensor& result);
  // The target quantizer for an argument's accel quantizer, and the accel
  // quantizer for a target quantizer (the one it stands for, or a new one
  // whose parts are mapped as results are).
  at::QuantizerPtr targetQuantizer(at::QuantizerPtr accel);
  at::QuantizerPtr accelQuantizer(const at::QuantizerPtr& target);

  const c10::OperatorHandle& op_;
  const OperatorFacts& facts_;
  const c10::DispatchKey target_key_;
  // An explicit device argument other than accel (`empty_like(x, device="cpu")`):
  // results of the target's device type are then that device's tensors.
  bool names_other_device_ = false;
  // Some argument is written to (out=, in-place): syncBack() has work.
  bool any_mutable_ = false;
  // Some argument is made of parts (sparse, nested): syncComposed() may have work.
  bool any_composed_ = false;
  c10::SmallVector<MappedTensor, 4> inputs_;
  // c10::InferenceMode::is_enabled(), read for the first target view.
  std::optional<bool> inference_mode_;
  c10::DeviceIndex device_ = -1;
  c10::DeviceIndex other_accel_device_ = -1;
  // The device of the first other tensor that CUDA's rules refuse.
  std::optional<c10::Device> foreign_device_;
  c10::SmallVector<std::pair<const c10::StorageImpl*, size_t>, 2> result_storage_refs_;
  c10::SmallVector<std::pair<const c10::StorageImpl*, c10::Storage>, 2> adopted_;
  // Target quantizers and the accel quantizers they stand for: those of the
  // quantized arguments, and those of results already mapped.
  c10::SmallVector<std::pair<at::QuantizerPtr, at::QuantizerPtr>, 1> quantizers_;
};

// --- Inline: the strided mapping that the dense path and quantized arguments share ---
//
// Defined here so that the dense path (TargetCall.cpp) inlines them, as it did
// before the other kinds moved behind the seam: they run for every argument.

// A few target kernels compute more when their inputs need gradients and
// grad mode is on (sparse.mm's amax/amin reductions keep the argmax indices
// their backward reads; the SDPA choice refuses some backends), and the
// target kernel runs below autograd with grad mode as the caller left it. A
// target view requires grad where its accel tensor does, so the kernel
// computes what it computes for the target's tensors. Only under grad mode:
// no kernel reads requires_grad without it, and a view that requires grad
// is not recycled (optimizer steps under no_grad keep theirs cheap).
inline void TargetCall::mirrorRequiresGrad(const at::Tensor& accel, const at::Tensor& target) {
  if (C10_UNLIKELY(accel.requires_grad()) && c10::GradMode::is_enabled()) {
    target.unsafeGetTensorImpl()->set_requires_grad(true);
  }
}

inline at::Tensor TargetCall::targetOverMemory(const at::Tensor& accel, const c10::StorageImpl* accel_storage) {
  // Another view of a storage already mapped (x[1:] and x[:-1]) gets a
  // view of the same target storage, or the target kernel could not tell
  // that the two overlap.
  const MappedTensor* same_storage = nullptr;
  for (const auto& mapped : inputs_) {
    if (mapped.accel_storage == accel_storage) {
      same_storage = &mapped;
      break;
    }
  }
  // Resizable even when not written to here: the same tensor may come back
  // as a mutable argument later in the argument list.
  if (!inference_mode_.has_value()) {
    inference_mode_ = inferenceModeEnabled(); // once per call, for all its views
  }
  return same_storage ? toTargetSharingStorage(accel, same_storage->target)
                      : toResizableTarget(accel, *inference_mode_);
}

inline void TargetCall::addInput(
    c10::MaybeOwned<at::Tensor>&& accel,
    const at::Tensor& target,
    const c10::StorageImpl* accel_storage,
    bool is_mutable) {
  mirrorRequiresGrad(*accel, target);
  c10::StorageImpl* target_storage = target.storage().unsafeGetStorageImpl();
  inputs_.emplace_back(std::move(accel), target, accel_storage, target_storage, is_mutable);
  any_mutable_ |= is_mutable;
}

inline const TargetCall::MappedTensor* TargetCall::argumentViewedBy(const at::Tensor& result) const {
  const c10::StorageImpl* storage = result.storage().unsafeGetStorageImpl();
  for (const auto& mapped : inputs_) {
    // The storage the target view has now (a kernel may have given it
    // another: set_). Target views are plain strided tensors of ours, whose
    // storage needs no checked access.
    if (mapped.target_storage != nullptr &&
        storage == mapped.target.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl()) {
      return &mapped;
    }
  }
  return nullptr;
}

// How many operator calls the target has run for accel in this process
// (through the alias fallback or the unboxed kernels); tests use it to prove
// that view and metadata operations never reach either.
uint64_t targetCallCount();

} // namespace torch_accel
