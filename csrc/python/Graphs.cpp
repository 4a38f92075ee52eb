#include <csrc/core/AccelDevice.h>
#include <csrc/python/CapturedCall.h>
#include <csrc/python/Graphs.h>
#include <csrc/runtime/Graph.h>
#include <csrc/runtime/GraphRecording.h>
#include <csrc/runtime/Runtime.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <memory>
#include <optional>
#include <string>

namespace torch_accel {

namespace py = pybind11;

void initGraphBindings(py::module& m) {
  // Methods release the GIL as torch._C._CUDAGraph's do: capture and replay
  // run kernels, some of which (Meta kernels written in Python, during a host
  // capture) take it again.
  py::class_<Graph, std::unique_ptr<Graph>>(m, "_AccelGraph")
      .def(
          // torch_accel.graphs.Graph initialises accel first.
          py::init([](bool keep_graph) { return runtime().newGraph(keep_graph); }),
          py::arg("keep_graph") = false)
      .def(
          "register_generator_state",
          [](Graph& self, const at::Generator& generator) {
            TORCH_CHECK_VALUE(
                generator.device().type() == kAccel,
                "accel Graph.register_generator_state() takes an accel generator (torch.Generator(\"accel\")); got "
                "one for ",
                generator.device());
            py::gil_scoped_release no_gil;
            self.registerGenerator(generator);
          },
          py::arg("generator"))
      .def(
          "capture_begin",
          [](Graph& self, std::optional<c10::MempoolId_t> pool, const std::string& capture_error_mode) {
            const CaptureMode mode = captureModeFromName(capture_error_mode);
            py::gil_scoped_release no_gil;
            self.captureBegin(pool.value_or(c10::MempoolId_t{0, 0}), mode);
          },
          py::arg("pool") = std::nullopt,
          py::arg("capture_error_mode") = "global")
      .def("capture_end", &Graph::captureEnd, py::call_guard<py::gil_scoped_release>())
      .def("instantiate", &Graph::instantiate, py::call_guard<py::gil_scoped_release>())
      .def("replay", &Graph::replay, py::call_guard<py::gil_scoped_release>())
      .def("reset", &Graph::reset, py::call_guard<py::gil_scoped_release>())
      .def("pool", &Graph::pool, py::call_guard<py::gil_scoped_release>())
      .def("enable_debug_mode", &Graph::enableDebugMode, py::call_guard<py::gil_scoped_release>())
      .def("debug_dump", &Graph::debugDump, py::arg("debug_path"), py::call_guard<py::gil_scoped_release>());

  // Records a call of `function(*arguments)` as a step of the capture that
  // records the current stream of accel:`device`: replay() calls it again,
  // with the same arguments. It is how a host capture replays work that
  // reaches no accel kernel: Inductor's C++ kernels, which its generated code
  // calls directly with the data pointers of accel tensors (host memory).
  m.def(
      "_graph_record_host_call",
      [](py::function function, py::tuple arguments, c10::DeviceIndex device) {
        RecordingCapture* capture = anyCaptureRecording() ? recordingCaptureOnCurrentStream(device) : nullptr;
        TORCH_CHECK(
            capture != nullptr,
            "accel: _graph_record_host_call needs a capture recording the current stream of accel:",
            static_cast<int>(device));
        capture->checkValid();
        // The step may be destroyed without the GIL (a graph reset from C++):
        // the Python objects it holds are released with it taken.
        struct HostCall {
          py::function function;
          py::tuple arguments;
          ~HostCall() {
            py::gil_scoped_acquire gil;
            function = py::function();
            arguments = py::tuple();
          }
        };
        auto call = std::make_shared<HostCall>();
        call->function = std::move(function);
        call->arguments = std::move(arguments);
        std::string name = py::str(call->function.attr("__name__"));
        capture->record(std::move(name), device, [call] {
          py::gil_scoped_acquire gil; // Graph.replay() runs without it
          // The arguments tuple as recorded: no new one per replay.
          PyObject* result = PyObject_Call(call->function.ptr(), call->arguments.ptr(), nullptr);
          if (result == nullptr) {
            throw py::error_already_set();
          }
          Py_DECREF(result);
        });
      },
      py::arg("function"),
      py::arg("arguments"),
      py::arg("device"));

  initCapturedCallBindings(m);

  m.def("_graph_pool_handle", [] { return runtime().graphPoolHandle(); });
  // Called around torch.compile's captures: Runtime::clearLibraryWorkspaces.
  m.def("_clear_library_workspaces", [] { runtime().clearLibraryWorkspaces(); });
  m.def("_is_current_stream_capturing", [] {
    if (!runtimeInitialized() || runtime().deviceCount() == 0) {
      return false; // nothing can capture before accel starts (and asking must not start it)
    }
    const Runtime& rt = runtime();
    return rt.isStreamCapturing(rt.getStream(rt.getDevice()));
  });
}

} // namespace torch_accel
