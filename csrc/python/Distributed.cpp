// torch_accel._C's entry points for accel's c10d backend
// (torch_accel/_distributed.py registers it with torch.distributed).

#include <csrc/distributed/AccelBackend.h>
#include <csrc/python/Distributed.h>

namespace torch_accel {

void initDistributedBindings(pybind11::module& m) {
  // The engine arrives as torch's own c10d Backend object (ProcessGroupNCCL,
  // ProcessGroupGloo): pybind shares torch's registered c10d types with
  // extensions built by torch.utils.cpp_extension. The result is handed back
  // as a c10d Backend, which ProcessGroup._register_backend accepts.
  m.def(
      "_c10d_accel_backend",
      [](const c10::intrusive_ptr<c10d::Backend>& engine) -> c10::intrusive_ptr<c10d::Backend> {
        TORCH_CHECK_VALUE(engine, "accel's c10d backend needs an engine backend, got None");
        return c10::make_intrusive<AccelBackend>(engine);
      },
      pybind11::arg("engine"));
  m.def("_c10d_accel_backend_engine", [](const c10::intrusive_ptr<c10d::Backend>& backend) {
    const auto* accel = dynamic_cast<const AccelBackend*>(backend.get());
    TORCH_CHECK_VALUE(
        accel != nullptr, "expected accel's c10d backend, got the ", backend->getBackendName(), " backend");
    return accel->engine();
  });
}

} // namespace torch_accel
