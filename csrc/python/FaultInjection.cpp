#include <csrc/python/FaultInjection.h>
#include <csrc/runtime/FaultInjection.h>
#include <csrc/runtime/Runtime.h>

#include <c10/util/Exception.h>

#include <string>

namespace torch_accel {
namespace {

FaultKind faultKindNamed(const std::string& name) {
  for (const auto kind : {FaultKind::Allocation, FaultKind::StreamEvent, FaultKind::Copy}) {
    if (name == faultKindName(kind)) {
      return kind;
    }
  }
  TORCH_CHECK_VALUE(false, "accel: no fault kind '", name, "' (allocation, stream_event or copy)");
}

} // namespace

void initFaultInjectionBindings(pybind11::module& m) {
  m.def("_inject_faults", [](const std::string& kind, uint64_t nth, double probability, uint64_t seed) {
    runtime().injectFaults(faultKindNamed(kind), FaultPlan{nth, probability, seed});
  });
  m.def("_fault_counts", [](const std::string& kind) {
    const FaultCounts counts = runtime().faultCounts(faultKindNamed(kind));
    return std::make_pair(counts.operations, counts.injected);
  });
}

} // namespace torch_accel
