// Unboxed accel kernels for the hottest operators.
//
// Every operator without an accel kernel reaches the alias fallback, a boxed
// kernel: the dispatcher copies its arguments into IValues on a stack (for a
// tensor that Python holds, the first C++ reference also takes the GIL to
// keep its Python object alive), the fallback walks them, and the target's
// kernel is called boxed in turn. For the operators that small eager
// programs call most, that is a large part of accel's cost per call. The
// kernels here take the operator's typed C++ arguments instead and call the
// target's kernel unboxed (at::_ops::<op>::redispatch with the target's
// dispatch key), with no stack and no argument copies.
//
// They are not a second implementation: each one is TargetKernel<Op>, which
// maps the typed arguments and results one by one through TargetCall, the
// fallback's own semantics (see TargetCall.h). An operator listed here
// behaves exactly as it does through the fallback.

#include <csrc/aten/AliasFallback.h>
#include <csrc/aten/TargetCall.h>
#include <csrc/aten/TargetTensor.h>
#include <csrc/core/AccelDevice.h>
#include <csrc/runtime/GraphRecording.h>

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_foreach_add_ops.h>
#include <ATen/ops/_foreach_mul_ops.h>
#include <ATen/ops/_index_put_impl_ops.h>
#include <ATen/ops/_log_softmax_backward_data_ops.h>
#include <ATen/ops/_log_softmax_ops.h>
#include <ATen/ops/_softmax_backward_data_ops.h>
#include <ATen/ops/_softmax_ops.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/addcdiv_ops.h>
#include <ATen/ops/addcmul_ops.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/argmax_ops.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/cat_ops.h>
#include <ATen/ops/clamp_ops.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/embedding_dense_backward_ops.h>
#include <ATen/ops/eq_ops.h>
#include <ATen/ops/exp_ops.h>
#include <ATen/ops/fill_ops.h>
#include <ATen/ops/gelu_backward_ops.h>
#include <ATen/ops/gelu_ops.h>
#include <ATen/ops/gt_ops.h>
#include <ATen/ops/index_ops.h>
#include <ATen/ops/index_select_ops.h>
#include <ATen/ops/lerp_ops.h>
#include <ATen/ops/lt_ops.h>
#include <ATen/ops/masked_fill_ops.h>
#include <ATen/ops/max_ops.h>
#include <ATen/ops/max_pool2d_with_indices_backward_ops.h>
#include <ATen/ops/max_pool2d_with_indices_ops.h>
#include <ATen/ops/maximum_ops.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/mm_ops.h>
#include <ATen/ops/mse_loss_backward_ops.h>
#include <ATen/ops/mse_loss_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/native_batch_norm_backward_ops.h>
#include <ATen/ops/native_batch_norm_ops.h>
#include <ATen/ops/native_layer_norm_backward_ops.h>
#include <ATen/ops/native_layer_norm_ops.h>
#include <ATen/ops/ne_ops.h>
#include <ATen/ops/neg_ops.h>
#include <ATen/ops/nll_loss_backward_ops.h>
#include <ATen/ops/nll_loss_forward_ops.h>
#include <ATen/ops/pow_ops.h>
#include <ATen/ops/relu_ops.h>
#include <ATen/ops/rsqrt_ops.h>
#include <ATen/ops/sigmoid_backward_ops.h>
#include <ATen/ops/sigmoid_ops.h>
#include <ATen/ops/silu_ops.h>
#include <ATen/ops/sqrt_ops.h>
#include <ATen/ops/sub_ops.h>
#include <ATen/ops/sum_ops.h>
#include <ATen/ops/tanh_backward_ops.h>
#include <ATen/ops/tanh_ops.h>
#include <ATen/ops/threshold_backward_ops.h>
#include <ATen/ops/topk_ops.h>
#include <ATen/ops/where_ops.h>
#include <ATen/ops/zero_ops.h>
#include <c10/util/MaybeOwned.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <tuple>
#include <type_traits>
#include <utility>

namespace torch_accel {
namespace {

// A tensor argument's target counterpart: the target view of an accel tensor,
// or the tensor itself, borrowed (no reference count change).
c10::MaybeOwned<at::Tensor> mapTensor(TargetCall& call, const at::Tensor& tensor, size_t index, bool is_mutable) {
  if (isAccel(tensor)) {
    return c10::MaybeOwned<at::Tensor>::owned(
        call.mapTensor(c10::MaybeOwned<at::Tensor>::borrowed(tensor), is_mutable));
  }
  if (tensor.defined()) {
    call.noteOtherTensor(tensor, index);
  }
  return c10::MaybeOwned<at::Tensor>::borrowed(tensor);
}

template <class T> inline constexpr bool kDependentFalse = false;

// How an argument of C++ type T reaches the target kernel: map() turns the
// caller's value into what the call stores (in schema order, so TargetCall
// sees the arguments as the fallback does), pass() hands that to the target
// kernel as a T. Values that hold no tensor, device or generator pass as they
// are.
template <class T> struct Argument {
  static_assert(
      !std::is_same_v<std::decay_t<T>, at::Device> && !std::is_same_v<std::decay_t<T>, std::optional<at::Device>> &&
          !std::is_same_v<std::decay_t<T>, at::Generator> &&
          !std::is_same_v<std::decay_t<T>, std::optional<at::Generator>> &&
          !std::is_same_v<std::decay_t<T>, std::optional<at::Tensor>>,
      "an argument kind the unboxed kernels do not map: leave the operator to the alias fallback");
  using Stored = T;
  static Stored map(TargetCall& /*call*/, T value, size_t /*index*/, bool /*is_mutable*/) {
    return std::forward<T>(value);
  }
  static T pass(Stored& value) {
    return std::forward<T>(value);
  }
};

template <> struct Argument<const at::Tensor&> {
  using Stored = c10::MaybeOwned<at::Tensor>;
  static Stored map(TargetCall& call, const at::Tensor& tensor, size_t index, bool is_mutable) {
    return mapTensor(call, tensor, index, is_mutable);
  }
  static const at::Tensor& pass(Stored& value) {
    return *value;
  }
};

// In-place and out= arguments: the kernel gets an lvalue it may resize.
template <> struct Argument<at::Tensor&> {
  using Stored = at::Tensor;
  static Stored map(TargetCall& call, at::Tensor& tensor, size_t index, bool is_mutable) {
    return *mapTensor(call, tensor, index, is_mutable);
  }
  static at::Tensor& pass(Stored& value) {
    return value;
  }
};

template <> struct Argument<const std::optional<at::Tensor>&> {
  using Stored = std::optional<c10::MaybeOwned<at::Tensor>>;
  static Stored map(TargetCall& call, const std::optional<at::Tensor>& tensor, size_t index, bool is_mutable) {
    return tensor.has_value() ? Stored(mapTensor(call, *tensor, index, is_mutable)) : std::nullopt;
  }
  // The target kernel takes a const reference to an optional: this builds it.
  static std::optional<at::Tensor> pass(Stored& value) {
    return value.has_value() ? std::optional<at::Tensor>(**value) : std::nullopt;
  }
};

// A list of tensors, held as the target tensors that the kernel gets.
struct MappedTensors {
  c10::SmallVector<at::Tensor, 4> tensors;

  template <class List> MappedTensors(TargetCall& call, const List& list, size_t index, bool is_mutable) {
    for (const at::Tensor& tensor : list) {
      tensors.push_back(*mapTensor(call, tensor, index, is_mutable));
    }
  }
};

template <> struct Argument<const at::ITensorListRef&> {
  using Stored = MappedTensors;
  static Stored map(TargetCall& call, const at::ITensorListRef& list, size_t index, bool is_mutable) {
    return MappedTensors(call, list, index, is_mutable);
  }
  static at::ITensorListRef pass(Stored& value) {
    return at::ITensorListRef(at::ArrayRef<at::Tensor>(value.tensors));
  }
};

// A Tensor[] (the foreach operators'; mutable or not, as the schema says).
template <> struct Argument<at::TensorList> {
  using Stored = MappedTensors;
  static Stored map(TargetCall& call, at::TensorList list, size_t index, bool is_mutable) {
    return MappedTensors(call, list, index, is_mutable);
  }
  static at::TensorList pass(Stored& value) {
    return value.tensors;
  }
};

template <> struct Argument<const c10::List<std::optional<at::Tensor>>&> {
  using Stored = c10::List<std::optional<at::Tensor>>;
  static Stored map(TargetCall& call, const c10::List<std::optional<at::Tensor>>& list, size_t index, bool is_mutable) {
    Stored mapped;
    mapped.reserve(list.size());
    for (const std::optional<at::Tensor>& tensor : list) {
      mapped.push_back(
          tensor.has_value() ? std::optional<at::Tensor>(*mapTensor(call, *tensor, index, is_mutable)) : std::nullopt);
    }
    return mapped;
  }
  static const Stored& pass(Stored& value) {
    return value;
  }
};

// How the target kernel's result of type R comes back: count() shows each
// result tensor to the call before map() maps them (see TargetCall.h).
template <class R> struct Result { static_assert(kDependentFalse<R>, "a result kind the unboxed kernels do not map"); };

template <> struct Result<at::Tensor> {
  static void count(TargetCall& call, const at::Tensor& result) {
    call.countResult(result);
  }
  static at::Tensor map(TargetCall& call, const at::Tensor& result) {
    return call.mapResult(result);
  }
};

template <class... Ts> struct Result<std::tuple<Ts...>> {
  static void count(TargetCall& call, const std::tuple<Ts...>& result) {
    std::apply([&](const auto&... element) { (Result<Ts>::count(call, element), ...); }, result);
  }
  static std::tuple<Ts...> map(TargetCall& call, const std::tuple<Ts...>& result) {
    return std::apply(
        [&](const auto&... element) { return std::tuple<Ts...>(Result<Ts>::map(call, element)...); }, result);
  }
};

// The facts of an operator with an unboxed kernel. CUDA's nondeterministic
// alerts are raised by the boxed fallback only (see NondeterministicAlerts.h):
// such an operator must stay with it.
inline OperatorFacts factsOf(const c10::OperatorHandle& op) {
  OperatorFacts facts(op);
  TORCH_INTERNAL_ASSERT(
      facts.cuda_alert == nullptr,
      op.operator_name(),
      " may raise CUDA's nondeterministic alert: leave it to the boxed fallback");
  // Every operator here has target kernels on both runtimes (see below).
  TORCH_INTERNAL_ASSERT(op.hasComputedKernelForDispatchKey(targetDispatchKey()), op.operator_name());
  facts.always_has_target_kernel = true;
  return facts;
}

// The boxed fallback's entry, for calls that a graph capture records.
void runBoxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  runOnTarget(op, stack);
}

template <class Op, class Signature = typename Op::schema> struct TargetKernel;

template <class Op, class Ret, class... Args> struct TargetKernel<Op, Ret(Args...)> {
  static Ret call(Args... args) {
    static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(Op::name, Op::overload_name);
    static const OperatorFacts facts = factsOf(op);
    if (C10_UNLIKELY(anyCaptureRecording())) {
      // The boxed path records the call if its stream is being captured
      // (see GraphCapture.h) and runs it otherwise.
      return c10::impl::BoxedKernelWrapper<Ret(Args...)>::call(
          c10::BoxedKernel::makeFromFunction<&runBoxed>(), op, c10::DispatchKeySet(), args...);
    }
    return callWith(op, facts, std::index_sequence_for<Args...>{}, args...);
  }

private:
  template <size_t... I>
  static Ret callWith(
      const c10::OperatorHandle& op, const OperatorFacts& facts, std::index_sequence<I...> /*indices*/, Args... args) {
    TargetCall call(op, facts);
    // A braced initialiser maps the arguments in order.
    std::tuple<typename Argument<Args>::Stored...> mapped{
        Argument<Args>::map(call, std::forward<Args>(args), I, facts.mutable_arguments[I])...};
    call.prepare();
    const c10::DispatchKeySet target(targetDispatchKey());
    if constexpr (std::is_void_v<Ret>) {
      // In-place operators that return nothing (the foreach family).
      call.run([&] { Op::redispatch(target, Argument<Args>::pass(std::get<I>(mapped))...); });
      call.syncBack();
    } else if constexpr (std::is_same_v<Ret, at::Tensor&>) {
      at::Tensor& result = call.run(
          [&]() -> at::Tensor& { return Op::redispatch(target, Argument<Args>::pass(std::get<I>(mapped))...); });
      call.syncBack();
      // In-place and out= operators return one of their mutable arguments.
      return argumentOf(call, result, args...);
    } else {
      Ret result = call.run([&] { return Op::redispatch(target, Argument<Args>::pass(std::get<I>(mapped))...); });
      call.syncBack();
      Result<Ret>::count(call, result);
      return Result<Ret>::map(call, result);
    }
  }

  // The caller's argument whose target view `target` is.
  template <class... Ts> static at::Tensor& argumentOf(TargetCall& call, const at::Tensor& target, Ts&&... args) {
    const at::Tensor* accel = call.accelOf(target);
    at::Tensor* found = nullptr;
    (
        [&](auto&& arg) {
          if constexpr (std::is_same_v<decltype(arg), at::Tensor&>) {
            if (found == nullptr && accel != nullptr && arg.unsafeGetTensorImpl() == accel->unsafeGetTensorImpl()) {
              found = &arg;
            }
          }
        }(std::forward<Ts>(args)),
        ...);
    TORCH_INTERNAL_ASSERT(
        found != nullptr, Op::name, ".", Op::overload_name, " returned none of its mutable arguments");
    return *found;
  }
};

#define TORCH_ACCEL_TARGET_KERNEL(name, op) m.impl(name, TORCH_FN(TargetKernel<at::_ops::op>::call))

// The operators that eager programs call most (elementwise arithmetic and
// activations, reductions, matrix products, normalisation, pooling, losses,
// indexing, fills, and the foreach updates of optimizers), with their
// most common overloads (clone stays boxed: callgrind counted its unboxed
// kernel some 850 instructions dearer per call); every other operator
// and overload keeps the boxed fallback. All of them have target kernels on
// both runtimes.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  TORCH_ACCEL_TARGET_KERNEL("add.Tensor", add_Tensor);
  TORCH_ACCEL_TARGET_KERNEL("add_.Tensor", add__Tensor);
  TORCH_ACCEL_TARGET_KERNEL("sub.Tensor", sub_Tensor);
  TORCH_ACCEL_TARGET_KERNEL("sub_.Tensor", sub__Tensor);
  TORCH_ACCEL_TARGET_KERNEL("mul.Tensor", mul_Tensor);
  TORCH_ACCEL_TARGET_KERNEL("mul_.Tensor", mul__Tensor);
  TORCH_ACCEL_TARGET_KERNEL("div.Tensor", div_Tensor);
  TORCH_ACCEL_TARGET_KERNEL("div_.Tensor", div__Tensor);
  TORCH_ACCEL_TARGET_KERNEL("pow.Tensor_Scalar", pow_Tensor_Scalar);
  TORCH_ACCEL_TARGET_KERNEL("neg", neg);
  TORCH_ACCEL_TARGET_KERNEL("exp", exp);
  TORCH_ACCEL_TARGET_KERNEL("sqrt", sqrt);
  TORCH_ACCEL_TARGET_KERNEL("rsqrt", rsqrt);
  TORCH_ACCEL_TARGET_KERNEL("tanh", tanh);
  TORCH_ACCEL_TARGET_KERNEL("sigmoid", sigmoid);
  TORCH_ACCEL_TARGET_KERNEL("relu", relu);
  TORCH_ACCEL_TARGET_KERNEL("gelu", gelu);
  TORCH_ACCEL_TARGET_KERNEL("silu", silu);
  TORCH_ACCEL_TARGET_KERNEL("threshold_backward", threshold_backward);
  TORCH_ACCEL_TARGET_KERNEL("gelu_backward", gelu_backward);
  TORCH_ACCEL_TARGET_KERNEL("sigmoid_backward", sigmoid_backward);
  TORCH_ACCEL_TARGET_KERNEL("tanh_backward", tanh_backward);
  TORCH_ACCEL_TARGET_KERNEL("addcmul_", addcmul_);
  TORCH_ACCEL_TARGET_KERNEL("addcdiv_", addcdiv_);
  TORCH_ACCEL_TARGET_KERNEL("lerp_.Scalar", lerp__Scalar);
  TORCH_ACCEL_TARGET_KERNEL("_foreach_add_.List", _foreach_add__List);
  TORCH_ACCEL_TARGET_KERNEL("_foreach_add_.Scalar", _foreach_add__Scalar);
  TORCH_ACCEL_TARGET_KERNEL("_foreach_mul_.Scalar", _foreach_mul__Scalar);
  TORCH_ACCEL_TARGET_KERNEL("_foreach_mul_.List", _foreach_mul__List);
  TORCH_ACCEL_TARGET_KERNEL("maximum", maximum);
  TORCH_ACCEL_TARGET_KERNEL("clamp", clamp);
  TORCH_ACCEL_TARGET_KERNEL("eq.Tensor", eq_Tensor);
  TORCH_ACCEL_TARGET_KERNEL("eq.Scalar", eq_Scalar);
  TORCH_ACCEL_TARGET_KERNEL("gt.Tensor", gt_Tensor);
  TORCH_ACCEL_TARGET_KERNEL("gt.Scalar", gt_Scalar);
  TORCH_ACCEL_TARGET_KERNEL("lt.Scalar", lt_Scalar);
  TORCH_ACCEL_TARGET_KERNEL("ne.Scalar", ne_Scalar);
  TORCH_ACCEL_TARGET_KERNEL("where.self", where_self);
  TORCH_ACCEL_TARGET_KERNEL("masked_fill_.Scalar", masked_fill__Scalar);
  TORCH_ACCEL_TARGET_KERNEL("sum.dim_IntList", sum_dim_IntList);
  TORCH_ACCEL_TARGET_KERNEL("mean.dim", mean_dim);
  TORCH_ACCEL_TARGET_KERNEL("max.dim", max_dim);
  TORCH_ACCEL_TARGET_KERNEL("argmax", argmax);
  TORCH_ACCEL_TARGET_KERNEL("topk", topk);
  TORCH_ACCEL_TARGET_KERNEL("mm", mm);
  TORCH_ACCEL_TARGET_KERNEL("bmm", bmm);
  TORCH_ACCEL_TARGET_KERNEL("addmm", addmm);
  TORCH_ACCEL_TARGET_KERNEL("_softmax", _softmax);
  TORCH_ACCEL_TARGET_KERNEL("_softmax_backward_data", _softmax_backward_data);
  TORCH_ACCEL_TARGET_KERNEL("_log_softmax", _log_softmax);
  TORCH_ACCEL_TARGET_KERNEL("_log_softmax_backward_data", _log_softmax_backward_data);
  TORCH_ACCEL_TARGET_KERNEL("nll_loss_forward", nll_loss_forward);
  TORCH_ACCEL_TARGET_KERNEL("nll_loss_backward", nll_loss_backward);
  TORCH_ACCEL_TARGET_KERNEL("native_layer_norm", native_layer_norm);
  TORCH_ACCEL_TARGET_KERNEL("native_layer_norm_backward", native_layer_norm_backward);
  TORCH_ACCEL_TARGET_KERNEL("native_batch_norm", native_batch_norm);
  TORCH_ACCEL_TARGET_KERNEL("native_batch_norm_backward", native_batch_norm_backward);
  TORCH_ACCEL_TARGET_KERNEL("max_pool2d_with_indices", max_pool2d_with_indices);
  TORCH_ACCEL_TARGET_KERNEL("max_pool2d_with_indices_backward", max_pool2d_with_indices_backward);
  TORCH_ACCEL_TARGET_KERNEL("mse_loss", mse_loss);
  TORCH_ACCEL_TARGET_KERNEL("mse_loss_backward", mse_loss_backward);
  TORCH_ACCEL_TARGET_KERNEL("cat", cat);
  TORCH_ACCEL_TARGET_KERNEL("index.Tensor", index_Tensor);
  TORCH_ACCEL_TARGET_KERNEL("_index_put_impl_", _index_put_impl_);
  TORCH_ACCEL_TARGET_KERNEL("index_select", index_select);
  TORCH_ACCEL_TARGET_KERNEL("embedding_dense_backward", embedding_dense_backward);
  TORCH_ACCEL_TARGET_KERNEL("fill_.Scalar", fill__Scalar);
  TORCH_ACCEL_TARGET_KERNEL("zero_", zero_);
}

} // namespace
} // namespace torch_accel
