// The alias fallback: how every ATen operator without an accel kernel of its
// own runs on accel (see "The alias fallback" in docs/design.md).
//
// A boxed fallback: it walks the operator's arguments and results as IValues
// on the dispatcher's stack and leaves the semantics (target views, device
// rules, running the target kernel, mapping results back) to TargetCall,
// which the unboxed kernels of the hottest operators (TargetKernels.cpp)
// share.

#include <csrc/aten/AliasFallback.h>
#include <csrc/aten/TargetCall.h>
#include <csrc/aten/TargetTensor.h>
#include <csrc/core/AccelDevice.h>
#include <csrc/graphs/GraphCapture.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace torch_accel {
namespace {

// Operator facts per operator, per thread (so no lock).
const OperatorFacts& factsFor(const c10::OperatorHandle& op) {
  // Keyed by schema address; the name check catches an address reused by an
  // operator registered after another was removed.
  thread_local std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OperatorFacts>> cache;
  auto& slot = cache[&op.schema()];
  if (!slot || slot->name != op.operator_name()) {
    slot = std::make_unique<OperatorFacts>(op);
  }
  return *slot;
}

// A tensor argument: the target view of an accel tensor, which the call keeps
// (moved off the stack, as the stack slot takes the view).
c10::IValue mapTensorValue(TargetCall& call, at::Tensor tensor, size_t index, bool is_mutable) {
  if (isAccel(tensor)) {
    return call.mapTensor(c10::MaybeOwned<at::Tensor>::owned(std::move(tensor)), is_mutable);
  }
  if (tensor.defined()) {
    call.noteOtherTensor(tensor, index);
  }
  return tensor;
}

at::Tensor mapListTensor(TargetCall& call, const at::Tensor& tensor, size_t index, bool is_mutable) {
  if (isAccel(tensor)) {
    return call.mapTensor(c10::MaybeOwned<at::Tensor>::owned(at::Tensor(tensor)), is_mutable);
  }
  if (tensor.defined()) {
    call.noteOtherTensor(tensor, index);
  }
  return tensor;
}

// Replaces one argument on the stack by what the target kernel gets.
void mapArgument(
    TargetCall& call,
    const OperatorFacts& facts,
    size_t index,
    c10::IValue& value,
    c10::SmallVector<size_t, 1>& default_generator_args) {
  const bool is_mutable = facts.mutable_arguments[index];
  if (value.isTensor()) {
    value = mapTensorValue(call, std::move(value).toTensor(), index, is_mutable);
  } else if (value.isTensorList()) {
    auto list = value.toTensorList();
    c10::List<at::Tensor> mapped;
    mapped.reserve(list.size());
    for (const at::Tensor& tensor : list) {
      mapped.push_back(mapListTensor(call, tensor, index, is_mutable));
    }
    value = mapped;
  } else if (value.isOptionalTensorList()) {
    auto list = value.toOptionalTensorList();
    c10::List<std::optional<at::Tensor>> mapped;
    mapped.reserve(list.size());
    for (const std::optional<at::Tensor>& tensor : list) {
      mapped.push_back(
          tensor.has_value() ? std::optional<at::Tensor>(mapListTensor(call, *tensor, index, is_mutable))
                             : std::nullopt);
    }
    value = mapped;
  } else if (value.isDevice()) {
    value = c10::IValue(call.mapDevice(value.toDevice()));
  } else if (value.isGenerator()) {
    value = c10::IValue(call.mapGenerator(value.toGenerator()));
  } else if (value.isNone() && facts.optional_generators[index]) {
    // Without a generator the target kernel would draw from the target
    // device's default generator; accel has its own.
    default_generator_args.push_back(index);
  }
}

template <typename Fn> void forEachTensor(const c10::IValue& value, Fn&& fn) {
  if (value.isTensor()) {
    fn(value.toTensor());
  } else if (value.isTensorList()) {
    for (const at::Tensor& tensor : value.toTensorList()) {
      fn(tensor);
    }
  }
}

c10::IValue mapResult(TargetCall& call, c10::IValue value) {
  if (value.isTensor()) {
    return call.mapResult(value.toTensor());
  }
  if (value.isTensorList()) {
    auto list = value.toTensorList();
    c10::List<at::Tensor> mapped;
    mapped.reserve(list.size());
    for (const at::Tensor& tensor : list) {
      mapped.push_back(call.mapResult(tensor));
    }
    return mapped;
  }
  return value;
}

// The accel tensor kinds, each a functionality of the PrivateUse1 backend:
// strided (Dense), quantized, sparse COO, sparse compressed, nested. An operator runs
// under the highest functionality among its tensors' keys (a sparse matrix
// times a strided one is a sparse operator), on accel as on the target, so
// the fallback of each kind calls the target's kernel for the same kind.
constexpr c10::DispatchKey kKinds[] = {
    c10::DispatchKey::Dense,
    c10::DispatchKey::Quantized,
    c10::DispatchKey::Sparse,
    c10::DispatchKey::SparseCsr,
    c10::DispatchKey::NestedTensor,
};

template <c10::DispatchKey Kind> void aliasFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  static const c10::DispatchKey target_key =
      Kind == c10::DispatchKey::Dense ? targetDispatchKey() : targetDispatchKey(Kind);
  runOnTarget(op, stack, target_key);
}

torch::CppFunction fallbackFor(c10::DispatchKey kind) {
  switch (kind) {
  case c10::DispatchKey::Quantized:
    return torch::CppFunction::makeFromBoxedFunction<&aliasFallback<c10::DispatchKey::Quantized>>();
  case c10::DispatchKey::Sparse:
    return torch::CppFunction::makeFromBoxedFunction<&aliasFallback<c10::DispatchKey::Sparse>>();
  case c10::DispatchKey::SparseCsr:
    return torch::CppFunction::makeFromBoxedFunction<&aliasFallback<c10::DispatchKey::SparseCsr>>();
  case c10::DispatchKey::NestedTensor:
    return torch::CppFunction::makeFromBoxedFunction<&aliasFallback<c10::DispatchKey::NestedTensor>>();
  default:
    return torch::CppFunction::makeFromBoxedFunction<&aliasFallback<c10::DispatchKey::Dense>>();
  }
}

// The accel dispatch key of a kind (PrivateUse1, QuantizedPrivateUse1, ...).
c10::DispatchKey accelKey(c10::DispatchKey kind) {
  return c10::toRuntimePerBackendFunctionalityKey(kind, c10::BackendComponent::PrivateUse1Bit);
}

// The fallback for dense accel tensors is registered at load time. Those of
// the other kinds (quantized, sparse, nested) are registered at accel
// initialisation, by preferTargetKernels(): a backend fallback updates the
// dispatch table of every operator (about 3,700), which costs about 3 ms per
// key, and such tensors only exist once accel is initialised (their data
// lives in accel memory), so `import torch_accel` does not pay for them.
TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(fallbackFor(c10::DispatchKey::Dense));
}

// Operators whose composite kernel PrivateUse1 cannot run: it calls
// CPU/CUDA-only code directly (a DispatchStub keyed by the tensors' device
// type, which has no PrivateUse1 kernel, or a CPU kernel), or accepts only the
// device types it names. Through the fallback the composite runs on target
// tensors instead. Every one is CompositeExplicitAutograd: its autograd
// kernel is above the backend key, so routing it changes no gradient. The
// stubs of PyTorch 2.11 that a composite kernel reaches for accel tensors
// were found in libtorch_cpu's code (tools/composite_stub_calls.py, see
// docs/alias-fallback.md, "DispatchStubs"); those reached from
// CompositeImplicitAutograd kernels, whose decomposition must stay above
// autograd, get a PrivateUse1 kernel of their own instead (TargetStubs.cpp).
bool runsOnTargetComposite(const c10::OperatorName& name) {
  static const std::pair<std::string_view, std::string_view> ops[] = {
      // conj_physical_stub
      {"aten::conj_physical_", ""},
      // ldexp_stub, for integer exponents (ldexp_ calls ldexp.out)
      {"aten::ldexp", "Tensor"},
      {"aten::ldexp", "out"},
      // kaiser_window_stub
      {"aten::kaiser_window", ""},
      {"aten::kaiser_window", "periodic"},
      {"aten::kaiser_window", "beta"},
      // batch_norm_cpu (which calls batch_norm_cpu_collect_stats_stub)
      {"aten::_batch_norm_no_update", ""},
      // "mode only supports CPU, CUDA and XPU device type"
      {"aten::mode", "values"},
      // addr_(self) calls addr.out(self, ..., out=self), whose kernel tells
      // in-place from out-of-place (and rejects a self that is not 2-D) by
      // comparing the two references: a boxed call never gives it the same one.
      {"aten::addr_", ""},
  };
  for (const auto& [op, overload] : ops) {
    if (name.name == op && name.overload_name == overload) {
      return true;
    }
  }
  return false;
}

// Operators that must keep their composite kernel on accel: they move data
// between devices or manage storage, which the fallback's same-device rule
// and memory model do not describe.
bool keepsCompositeKernel(std::string_view name, c10::DispatchKey kind) {
  // Moves between devices: the composite makes the result on the other
  // device and copies into it (quantized and sparse tensors too).
  static const std::string_view moves[] = {
      "aten::_to_copy",
      "aten::to",
      "aten::lift",
      "aten::lift_fresh",
      "aten::lift_fresh_copy",
  };
  for (const auto op : moves) {
    if (name == op) {
      return true;
    }
  }
  // Quantized and sparse tensors are made, resized and copied by the
  // target's kernels (empty_like_quantized, resize_as_sparse_,
  // copy_sparse_to_sparse_, ...); the composite kernels know strided tensors.
  if (kind != c10::DispatchKey::Dense) {
    return false;
  }
  static const std::string_view ops[] = {
      "aten::copy_",
      "aten::_pin_memory",
      "aten::is_pinned",
      "aten::pin_memory",
      "aten::resize_as_",
      "aten::_has_same_storage_numel",
      "aten::set_",
  };
  for (const auto op : ops) {
    if (name == op) {
      return true;
    }
  }
  return name.rfind("aten::empty", 0) == 0 || name.rfind("aten::new_", 0) == 0;
}

} // namespace

void runOnTarget(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  runOnTarget(op, stack, targetDispatchKey());
}

void runOnTarget(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DispatchKey target_key) {
  if (C10_UNLIKELY(anyCaptureRecording()) && recordIfCapturing(op, stack, target_key)) {
    return; // the capture replays the call (see GraphCapture.h)
  }
  const OperatorFacts& facts = factsFor(op);
  const auto& schema = op.schema();
  TargetCall call(op, facts, target_key);
  const size_t arguments = schema.arguments().size();
  const size_t begin = stack->size() - arguments;
  c10::SmallVector<size_t, 1> default_generator_args;
  for (size_t i = 0; i < arguments; ++i) {
    mapArgument(call, facts, i, (*stack)[begin + i], default_generator_args);
  }
  call.prepare();
  if (facts.cuda_alert != nullptr) {
    alertIfNondeterministicOnCuda(*facts.cuda_alert, c10::ArrayRef<c10::IValue>(*stack).slice(begin, arguments));
  }
  for (const size_t i : default_generator_args) {
    (*stack)[begin + i] = c10::IValue(call.defaultGenerator());
  }
  call.run([&] { op.redispatchBoxed(c10::DispatchKeySet(target_key), stack); });
  call.syncBack();
  const size_t results = schema.returns().size();
  for (size_t i = stack->size() - results; i < stack->size(); ++i) {
    forEachTensor((*stack)[i], [&](const at::Tensor& tensor) { call.countResult(tensor); });
  }
  for (size_t i = stack->size() - results; i < stack->size(); ++i) {
    (*stack)[i] = mapResult(call, std::move((*stack)[i]));
  }
}

void preferTargetKernels() {
  // Many operators have both target kernels and a composite kernel, which
  // PrivateUse1 would otherwise get: a decomposition (slower, and for some,
  // like native_layer_norm or mish_backward, not bitwise the target's result)
  // or a functional wrapper around the out= variant. Route them to the
  // target's own kernel through the fallback instead. For a
  // CompositeImplicitAutograd operator this also gives accel the target's
  // autograd behaviour: a kernel on the backend key keeps the decomposition
  // off the backend's autograd key too, exactly as for the target.
  // The same holds for each kind of tensor: the target's quantized or sparse
  // kernel, not the composite kernel, as on the target.
  static std::once_flag registered;
  std::call_once(registered, [] {
    auto& dispatcher = c10::Dispatcher::singleton();
    const auto names = dispatcher.getAllOpNames();
    for (const c10::DispatchKey kind : kKinds) {
      const c10::DispatchKey accel_key = accelKey(kind);
      const c10::DispatchKey target_key =
          kind == c10::DispatchKey::Dense ? targetDispatchKey() : targetDispatchKey(kind);
      static std::deque<torch::Library> libraries;
      if (kind != c10::DispatchKey::Dense) {
        // The kind's fallback (the dense one is registered at load time).
        libraries.emplace_back(torch::Library::IMPL, "_", accel_key, __FILE__, __LINE__).fallback(fallbackFor(kind));
      }
      auto& library = libraries.emplace_back(torch::Library::IMPL, "aten", accel_key, __FILE__, __LINE__);
      for (const auto& name : names) {
        if (name.getNamespace() != std::optional<std::string_view>("aten")) {
          continue;
        }
        const auto op = dispatcher.findOp(name);
        const bool on_target_composite = kind == c10::DispatchKey::Dense && runsOnTargetComposite(name);
        if (!op.has_value() || op->hasKernelForDispatchKey(accel_key) ||
            !(op->hasKernelForDispatchKey(target_key) || on_target_composite)) {
          continue;
        }
        const bool composite = op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
                               op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) ||
                               op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
        if (!(composite || on_target_composite) || keepsCompositeKernel(name.name, kind)) {
          continue;
        }
        // The library keeps pointers to the names it registers.
        static std::deque<std::string> impl_names;
        impl_names.push_back(c10::toString(name).substr(std::string_view("aten::").size()));
        library.impl(impl_names.back().c_str(), fallbackFor(kind));
      }
    }
  });
}

} // namespace torch_accel
