// Fault injection: operations of an armed kind fail by number or by seeded chance (accelrt.h).
#include <array>
#include <cstdint>

#include "internal.h"

namespace accelrt {
namespace detail {

std::atomic<unsigned> armed_fault_kinds{0};

namespace {

constexpr int kFaultKinds = 3;

struct FaultPlan {
  std::atomic<std::uint64_t> nth{0};
  std::atomic<std::uint64_t> threshold{0}; // an operation fails when its draw is below it
  std::atomic<bool> always{false};         // probability 1: every draw fails
  std::atomic<std::uint64_t> seed{0};
  std::atomic<std::uint64_t> operations{0};
  std::atomic<std::uint64_t> injected{0};
};

std::array<FaultPlan, kFaultKinds>& plans() {
  return leaked_singleton<std::array<FaultPlan, kFaultKinds>>();
}

bool valid_kind(int kind) {
  return kind >= 0 && kind < kFaultKinds;
}

// SplitMix64: a well-mixed 64-bit value for each (seed, operation number), so that the draws do
// not depend on which thread counts which operation first.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

} // namespace

accelrtError_t draw_fault(accelrtFaultKind kind) {
  const int k = enum_value(kind);
  if ((armed_fault_kinds.load(std::memory_order_acquire) & (1u << k)) == 0)
    return accelrtSuccess;
  FaultPlan& plan = plans()[static_cast<std::size_t>(k)];
  const std::uint64_t number = plan.operations.fetch_add(1, std::memory_order_relaxed) + 1;
  const bool fails =
      number == plan.nth.load(std::memory_order_relaxed) || plan.always.load(std::memory_order_relaxed) ||
      mix(plan.seed.load(std::memory_order_relaxed) ^ mix(number)) < plan.threshold.load(std::memory_order_relaxed);
  if (!fails)
    return accelrtSuccess;
  plan.injected.fetch_add(1, std::memory_order_relaxed);
  return k == accelrtFaultAllocation ? accelrtErrorMemoryAllocation : accelrtErrorInjectedFault;
}

} // namespace detail
} // namespace accelrt

using namespace accelrt::detail;

extern "C" {

accelrtError_t
accelrtFaultInject(accelrtFaultKind kind, unsigned long long nth, double probability, unsigned long long seed) {
  const int k = enum_value(kind);
  // The negated comparison also rejects NaN.
  if (!valid_kind(k) || !(probability >= 0.0 && probability <= 1.0))
    return accelrtErrorInvalidValue;
  FaultPlan& plan = plans()[static_cast<std::size_t>(k)];
  // Disarmed while the plan changes, so that no operation draws from half of it.
  armed_fault_kinds.fetch_and(~(1u << k), std::memory_order_acq_rel);
  plan.nth.store(nth, std::memory_order_relaxed);
  // 2^64 * probability, exact for the probabilities a double can tell apart from 1.
  plan.threshold.store(
      probability >= 1.0 ? 0 : static_cast<std::uint64_t>(probability * 18446744073709551616.0),
      std::memory_order_relaxed);
  plan.always.store(probability >= 1.0, std::memory_order_relaxed);
  plan.seed.store(seed, std::memory_order_relaxed);
  plan.operations.store(0, std::memory_order_relaxed);
  plan.injected.store(0, std::memory_order_relaxed);
  if (nth != 0 || probability > 0.0)
    armed_fault_kinds.fetch_or(1u << k, std::memory_order_acq_rel);
  return accelrtSuccess;
}

accelrtError_t
accelrtFaultGetCounts(accelrtFaultKind kind, unsigned long long* operations, unsigned long long* injected) {
  const int k = enum_value(kind);
  if (!valid_kind(k))
    return accelrtErrorInvalidValue;
  const FaultPlan& plan = plans()[static_cast<std::size_t>(k)];
  if (operations != nullptr)
    *operations = plan.operations.load(std::memory_order_relaxed);
  if (injected != nullptr)
    *injected = plan.injected.load(std::memory_order_relaxed);
  return accelrtSuccess;
}

accelrtError_t accelrtFaultCheck(accelrtFaultKind kind) {
  if (!valid_kind(enum_value(kind)))
    return accelrtErrorInvalidValue;
  return injected_fault(kind);
}

} // extern "C"
