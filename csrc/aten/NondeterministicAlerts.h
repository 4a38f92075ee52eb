#pragma once

// CUDA's nondeterministic-operator alerts, raised for accel on every runtime.
//
// With torch.use_deterministic_algorithms(True), PyTorch's CUDA kernels that
// have no deterministic implementation (atomicAdd-based backwards, histc,
// scatter_reduce with "prod", put_ with accumulate, ...) raise
// at::Context::alertNotDeterministic (an error, or a warning with
// warn_only=True). accel stands in for a CUDA device, so it follows CUDA's
// contract on both runtimes, as it follows CUDA's autocast policy: code
// written against the host runtime then raises where it would on a GPU.
//
// On the CUDA runtime the target's CUDA kernels raise these alerts
// themselves, inside the fallback's call. On a target whose kernels do not
// (the host runtime's CPU kernels are deterministic and never alert), the
// fallback raises the alert CUDA's kernel would raise, with the same caller
// name, before running the target's kernel. The operators and conditions are
// CUDA's as of PyTorch 2.11 (see the table in NondeterministicAlerts.cpp).

#include <ATen/core/ivalue.h>
#include <ATen/core/operator_name.h>
#include <c10/util/ArrayRef.h>

namespace torch_accel {

struct CudaNondeterministicAlert;

// The alert that CUDA's kernel for `name` may raise, or nullptr.
const CudaNondeterministicAlert* cudaNondeterministicAlert(const c10::OperatorName& name);

// Raises `alert` as CUDA's kernel does for these arguments (the operator's
// arguments in schema order), if deterministic algorithms are enabled and the
// target's kernels do not raise CUDA's alerts themselves.
void alertIfNondeterministicOnCuda(const CudaNondeterministicAlert& alert, c10::ArrayRef<c10::IValue> arguments);

} // namespace torch_accel
