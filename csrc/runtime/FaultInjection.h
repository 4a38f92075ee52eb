#pragma once

// Fault injection (docs/fault-injection.md): operations of an armed kind
// fail as if the device had failed them, so that tests reach the error
// paths of everything above the runtime. The runtime injects the faults
// (Runtime::injectFaults); this file holds what is the same on every
// runtime: the kinds and plans, the switch that copies test before asking
// the runtime, and TORCH_ACCEL_HOST_FAULTS's syntax.

#include <c10/macros/Macros.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace torch_accel {

enum class FaultKind {
  Allocation,  // device memory allocations: torch.OutOfMemoryError
  StreamEvent, // stream and event operations: RuntimeError
  Copy,        // copies to, from and between accel devices: RuntimeError
};

constexpr int kFaultKinds = 3;

// "allocation", "stream_event", "copy".
const char* faultKindName(FaultKind kind) noexcept;

// Counting the operations of a kind from when it is armed (1, 2, ...),
// operation `nth` fails (0: none), and each one fails with `probability`,
// drawn from a generator seeded with `seed`: the same plan fails the same
// operations of the same program. A plan with neither disarms its kind.
struct FaultPlan {
  uint64_t nth = 0;
  double probability = 0.0;
  uint64_t seed = 0;

  bool armed() const noexcept {
    return nth != 0 || probability > 0.0;
  }
};

// Operations of a kind counted, and failed by injection, since it was armed.
struct FaultCounts {
  uint64_t operations = 0;
  uint64_t injected = 0;
};

namespace detail {
extern std::atomic<bool> copy_faults_armed;
} // namespace detail

// Whether copy faults are armed: copy code asks the runtime
// (Runtime::checkCopyFault) only then, so that a copy pays one relaxed load
// and one predictable branch while they are not.
inline bool copyFaultsArmed() noexcept {
  return detail::copy_faults_armed.load(std::memory_order_relaxed);
}

// Set by a runtime's injectFaults() when it arms or disarms copy faults.
void setCopyFaultsArmed(bool armed) noexcept;

// The plans in environment variable `name` (unset or empty: none), one entry
// per kind, separated by commas: KIND:KEY=VALUE[:KEY=VALUE...] with KIND one
// of faultKindName()'s and KEY nth (an integer >= 1), probability (a number
// in [0, 1]) or seed (an integer >= 0), e.g.
// "allocation:nth=3,copy:probability=0.01:seed=7". Anything else, or a kind
// named twice, raises ValueError naming the variable.
std::vector<std::pair<FaultKind, FaultPlan>> faultPlansFromEnvironment(const char* name);

} // namespace torch_accel
