#include <csrc/aten/NondeterministicAlerts.h>
#include <csrc/runtime/Runtime.h>

#include <ATen/Context.h>
#include <ATen/core/Tensor.h>

#include <string_view>

namespace torch_accel {

// One operator whose CUDA kernel calls alertNotDeterministic(caller) when
// `applies` holds for its arguments.
struct CudaNondeterministicAlert {
  std::string_view op;       // "aten::name"
  std::string_view overload; // kEveryOverload, or one overload name
  std::string_view caller;   // the name CUDA's kernel alerts with
  bool (*applies)(c10::ArrayRef<c10::IValue> arguments);
};

namespace {

constexpr std::string_view kEveryOverload = "*";

bool always(c10::ArrayRef<c10::IValue> /*arguments*/) {
  return true;
}

// _histc_cuda: atomicAdd on floating-point counts.
bool floatingSelf(c10::ArrayRef<c10::IValue> arguments) {
  return at::isFloatingType(arguments[0].toTensor().scalar_type());
}

// _bincount_cuda: with weights only (floating-point atomicAdd).
bool weightsGiven(c10::ArrayRef<c10::IValue> arguments) {
  return arguments[1].isTensor() && arguments[1].toTensor().defined();
}

// scatter (reduce="multiply") and scatter_reduce (reduce="prod"): ATen's
// scatter_impl takes a deterministic path (index_put_ with accumulate) for
// the other reductions on CUDA, and returns early for an empty index.
template <const char* kReduce> bool reducesWith(c10::ArrayRef<c10::IValue> arguments) {
  return arguments[2].toTensor().numel() > 0 && arguments[4].toStringRef() == kReduce;
}
constexpr char kMultiply[] = "multiply";
constexpr char kProd[] = "prod";

// put_: with accumulate, CUDA uses atomicAdd (without it, every device
// alerts, the CPU too, so the target raises that itself).
bool accumulates(c10::ArrayRef<c10::IValue> arguments) {
  return arguments[3].toBool();
}

// nll_loss2d_forward_out_cuda_template: the 'sum' and 'mean' reductions.
bool reduces(c10::ArrayRef<c10::IValue> arguments) {
  return arguments[3].toInt() != 0; // at::Reduction::None
}

// embedding_bag_backward_cuda_max: mode 'max' (EmbeddingBagMode::MAX) of
// _embedding_bag_dense_backward, which the composite _embedding_bag_backward
// calls unless its gradient is sparse (accel runs that composite on the target).
constexpr int64_t kEmbeddingBagMax = 2;
bool maxMode(c10::ArrayRef<c10::IValue> arguments) {
  return arguments[7].toInt() == kEmbeddingBagMax;
}
bool denseMaxMode(c10::ArrayRef<c10::IValue> arguments) {
  return arguments[8].toInt() == kEmbeddingBagMax && !arguments[9].toBool();
}

// CUDA's alerts in PyTorch 2.11 (its use_deterministic_algorithms list, read
// against ATen's CUDA sources and the strings of libtorch_cuda.so). Operators
// that CUDA makes deterministic instead (index_add, index_copy, index_put_
// with accumulate, scatter_add, scatter/scatter_reduce with sum and mean,
// cumsum, reflection_pad2d's backward, gather's backward) are not here: the
// target's kernels are deterministic already on the host runtime.
// bilinear/trilinear interpolation and 'replicate' padding take
// decompositions in torch.nn.functional before reaching an operator.
const CudaNondeterministicAlert kAlerts[] = {
    {"aten::avg_pool3d_backward", kEveryOverload, "avg_pool3d_backward_cuda", always},
    {"aten::_adaptive_avg_pool2d_backward", kEveryOverload, "adaptive_avg_pool2d_backward_cuda", always},
    {"aten::_adaptive_avg_pool3d_backward", kEveryOverload, "adaptive_avg_pool3d_backward_cuda", always},
    {"aten::adaptive_avg_pool3d_backward", kEveryOverload, "adaptive_avg_pool3d_backward_cuda", always},
    {"aten::max_pool3d_with_indices_backward", kEveryOverload, "max_pool3d_with_indices_backward_cuda", always},
    {"aten::adaptive_max_pool2d_backward", kEveryOverload, "adaptive_max_pool2d_backward_cuda", always},
    {"aten::adaptive_max_pool3d_backward", kEveryOverload, "adaptive_max_pool3d_backward_cuda", always},
    {"aten::fractional_max_pool2d_backward", kEveryOverload, "fractional_max_pool2d_backward_cuda", always},
    {"aten::fractional_max_pool3d_backward", kEveryOverload, "fractional_max_pool3d_backward_cuda", always},
    {"aten::upsample_linear1d_backward", kEveryOverload, "upsample_linear1d_backward_out_cuda", always},
    {"aten::upsample_bilinear2d_backward", kEveryOverload, "upsample_bilinear2d_backward_out_cuda", always},
    {"aten::upsample_bicubic2d_backward", kEveryOverload, "upsample_bicubic2d_backward_out_cuda", always},
    {"aten::upsample_trilinear3d_backward", kEveryOverload, "upsample_trilinear3d_backward_out_cuda", always},
    {"aten::_upsample_bilinear2d_aa_backward", kEveryOverload, "upsample_bilinear2d_aa_backward_out_cuda", always},
    {"aten::_upsample_bicubic2d_aa_backward", kEveryOverload, "upsample_bicubic2d_aa_backward_out_cuda", always},
    {"aten::reflection_pad1d_backward", kEveryOverload, "reflection_pad1d_backward_out_cuda", always},
    {"aten::reflection_pad3d_backward", kEveryOverload, "reflection_pad3d_backward_out_cuda", always},
    {"aten::replication_pad1d_backward", kEveryOverload, "replication_pad1d_backward_cuda", always},
    {"aten::replication_pad2d_backward", "", "replication_pad2d_backward_cuda", always},
    {"aten::replication_pad2d_backward", "grad_input", "replication_pad2d_backward_out_cuda", always},
    {"aten::replication_pad3d_backward", "", "replication_pad3d_backward_cuda", always},
    {"aten::replication_pad3d_backward", "grad_input", "replication_pad3d_backward_out_cuda", always},
    {"aten::grid_sampler_2d_backward", kEveryOverload, "grid_sampler_2d_backward_cuda", always},
    {"aten::grid_sampler_3d_backward", kEveryOverload, "grid_sampler_3d_backward_cuda", always},
    {"aten::_ctc_loss_backward", kEveryOverload, "ctc_loss_backward_gpu", always},
    {"aten::_embedding_bag_dense_backward", kEveryOverload, "embedding_bag_backward_cuda_max", maxMode},
    {"aten::_embedding_bag_backward", kEveryOverload, "embedding_bag_backward_cuda_max", denseMaxMode},
    {"aten::nll_loss2d_forward", kEveryOverload, "nll_loss2d_forward_out_cuda_template", reduces},
    {"aten::histc", kEveryOverload, "_histc_cuda with floating point input", floatingSelf},
    {"aten::bincount", kEveryOverload, "_bincount_cuda", weightsGiven},
    {"aten::median", "dim", "median CUDA with indices output", always},
    {"aten::median", "dim_values", "median CUDA with indices output", always},
    {"aten::nanmedian", "dim", "median CUDA with indices output", always},
    {"aten::nanmedian", "dim_values", "median CUDA with indices output", always},
    {"aten::index_reduce", kEveryOverload, "index_reduce_cuda", always},
    {"aten::index_reduce_", kEveryOverload, "index_reduce_cuda", always},
    {"aten::scatter", "reduce", "scatter_reduce_cuda_kernel", reducesWith<kMultiply>},
    {"aten::scatter", "reduce_out", "scatter_reduce_cuda_kernel", reducesWith<kMultiply>},
    {"aten::scatter_", "reduce", "scatter_reduce_cuda_kernel", reducesWith<kMultiply>},
    {"aten::scatter_reduce", kEveryOverload, "scatter_reduce_cuda_prod_", reducesWith<kProd>},
    {"aten::scatter_reduce_", kEveryOverload, "scatter_reduce_cuda_prod_", reducesWith<kProd>},
    {"aten::put", kEveryOverload, "put_", accumulates},
    {"aten::put_", kEveryOverload, "put_", accumulates},
};

bool matches(const CudaNondeterministicAlert& alert, const c10::OperatorName& name) {
  return name.name == alert.op && (alert.overload == kEveryOverload || name.overload_name == alert.overload);
}

} // namespace

const CudaNondeterministicAlert* cudaNondeterministicAlert(const c10::OperatorName& name) {
  for (const auto& alert : kAlerts) {
    if (matches(alert, name)) {
      return &alert;
    }
  }
  return nullptr;
}

void alertIfNondeterministicOnCuda(const CudaNondeterministicAlert& alert, c10::ArrayRef<c10::IValue> arguments) {
  if (C10_LIKELY(!at::globalContext().deterministicAlgorithms())) {
    return;
  }
  // CUDA's kernels raise their own alerts (see the header).
  if (runtime().targetKernelsRaiseCudaAlerts()) {
    return;
  }
  if (alert.applies(arguments)) {
    at::globalContext().alertNotDeterministic(alert.caller);
  }
}

} // namespace torch_accel
