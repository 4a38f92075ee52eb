#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdint>

namespace torch_accel {

// Runs `op` with the arguments on `stack` through the target's kernel, as the
// alias fallback does for every operator without an accel kernel.
void runOnTarget(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Registers the alias fallback explicitly for the operators whose target
// kernels PrivateUse1 would otherwise bypass for a composite kernel. Called
// once, at accel initialisation (the runtime, hence the target, is known).
void preferTargetKernels();

// How many operator calls the alias fallback has run in this process; tests
// use it to prove that view and metadata operations never reach it.
uint64_t aliasFallbackCalls();

} // namespace torch_accel
