#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace torch_accel {

// Runs `op` with the arguments on `stack` through the target's kernel, as the
// alias fallback does for every operator without an accel kernel.
void runOnTarget(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// runOnTarget through the target's kernel for `target_key` (the target's key
// for the tensors' kind: QuantizedCPU, SparseCUDA, ...).
void runOnTarget(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DispatchKey target_key);

// Registers the alias fallback of each non-dense tensor kind (quantized,
// sparse, nested: registered here rather than at load time, which they would
// slow down), and explicitly for the operators whose target kernels
// PrivateUse1 would otherwise bypass for a composite kernel. Called at accel
// initialisation (the runtime, hence the target, is known); runs once.
void preferTargetKernels();

} // namespace torch_accel
