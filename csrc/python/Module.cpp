// torch_accel._C: the Python-facing entry points of the runtime. The Python
// package (torch_accel/) builds torch.accel's API on these; streams and events
// themselves are PyTorch's generic torch.Stream / torch.Event, which reach the
// runtime through the PrivateUse1 device guard.

#include <csrc/aten/Empty.h>
#include <csrc/aten/TargetCall.h>
#include <csrc/core/AccelDevice.h>
#include <csrc/inductor/AOTIShim.h>
#ifdef TORCH_ACCEL_WITH_DISTRIBUTED
#include <csrc/python/Distributed.h>
#endif
#include <csrc/python/FaultInjection.h>
#include <csrc/python/Graphs.h>
#include <csrc/python/Interop.h>
#include <csrc/python/InterprocessEvent.h>
#include <csrc/python/Memory.h>
#include <csrc/python/Multiprocessing.h>
#include <csrc/python/TargetViews.h>
#include <csrc/runtime/AccelGenerator.h>
#include <csrc/runtime/AccelTrace.h>
#include <csrc/runtime/Runtime.h>
#include <torch_accel/include/torch_accel/accel.h>

#include <ATen/Context.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Event.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/device_lazy_init.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/utils/python_numbers.h>

#include <structmember.h>

#include <string>
#include <tuple>
#include <vector>

namespace torch_accel {
namespace {

namespace py = pybind11;

const c10::impl::DeviceGuardImplInterface& guard() {
  return *c10::impl::getDeviceGuardImpl(kAccel);
}

// An explicit index from Python: -1 would mean "current device" to c10, and
// a value beyond c10::DeviceIndex would wrap around, so it is taken as an
// int64_t and checked before it becomes a Device.
c10::Device accelDevice(int64_t index) {
  checkDeviceIndex(index);
  return c10::Device(kAccel, static_cast<c10::DeviceIndex>(index));
}

// Streams cross into Python as (stream_id, device_index, device_type), the
// packing torch.Stream's constructor accepts.
std::tuple<int64_t, int64_t, int64_t> pack(const c10::Stream& stream) {
  return {stream.id(), stream.device_index(), static_cast<int64_t>(stream.device_type())};
}

c10::Stream unpack(int64_t stream_id, int64_t device_index, int64_t device_type) {
  TORCH_CHECK(
      device_type == static_cast<int64_t>(kAccel),
      "Expected an accel stream, got a stream of device type ",
      c10::DeviceTypeName(static_cast<c10::DeviceType>(device_type)));
  return c10::Stream::unpack3(stream_id, static_cast<c10::DeviceIndex>(device_index), kAccel);
}

py::dict toDict(const DeviceProperties& p) {
  py::dict out;
  out["name"] = p.name;
  out["total_memory"] = p.total_memory;
  out["major"] = p.major;
  out["minor"] = p.minor;
  out["multi_processor_count"] = p.multi_processor_count;
  out["warp_size"] = p.warp_size;
  out["max_threads_per_block"] = p.max_threads_per_block;
  out["max_threads_per_multi_processor"] = p.max_threads_per_multi_processor;
  out["regs_per_multiprocessor"] = p.regs_per_multiprocessor;
  out["shared_memory_per_block"] = p.shared_memory_per_block;
  out["shared_memory_per_multiprocessor"] = p.shared_memory_per_multiprocessor;
  out["L2_cache_size"] = p.l2_cache_size;
  out["uuid"] = p.uuid;
  return out;
}

// DeviceStats as the nested dict torch.cuda.memory_stats flattens.
py::dict statsToDict(const c10::CachingDeviceAllocator::DeviceStats& stats) {
  const auto stat = [](const c10::CachingAllocator::Stat& s) {
    py::dict d;
    d["current"] = s.current;
    d["peak"] = s.peak;
    d["allocated"] = s.allocated;
    d["freed"] = s.freed;
    return d;
  };
  const auto array = [&](const c10::CachingAllocator::StatArray& a) {
    using Type = c10::CachingAllocator::StatType;
    py::dict d;
    d["all"] = stat(a[static_cast<size_t>(Type::AGGREGATE)]);
    d["small_pool"] = stat(a[static_cast<size_t>(Type::SMALL_POOL)]);
    d["large_pool"] = stat(a[static_cast<size_t>(Type::LARGE_POOL)]);
    return d;
  };
  py::dict d;
  d["allocation"] = array(stats.allocation);
  d["segment"] = array(stats.segment);
  d["active"] = array(stats.active);
  d["inactive_split"] = array(stats.inactive_split);
  d["allocated_bytes"] = array(stats.allocated_bytes);
  d["reserved_bytes"] = array(stats.reserved_bytes);
  d["active_bytes"] = array(stats.active_bytes);
  d["inactive_split_bytes"] = array(stats.inactive_split_bytes);
  d["requested_bytes"] = array(stats.requested_bytes);
  d["num_alloc_retries"] = stats.num_alloc_retries;
  d["num_ooms"] = stats.num_ooms;
  d["oversize_allocations"] = stat(stats.oversize_allocations);
  d["oversize_segments"] = stat(stats.oversize_segments);
  d["num_sync_all_streams"] = stats.num_sync_all_streams;
  d["num_device_alloc"] = stats.num_device_alloc;
  d["num_device_free"] = stats.num_device_free;
  d["max_split_size"] = stats.max_split_size;
  return d;
}

c10::DeviceAllocator* allocatorFor(int64_t device) {
  checkDeviceIndex(device);
  return runtime().allocator();
}

c10::SmallVector<int64_t, 8> unpackInts(PyObject* sequence, const char* what) {
  TORCH_CHECK_TYPE(PyTuple_Check(sequence), "_empty_strided: ", what, " must be a tuple of ints");
  const Py_ssize_t n = PyTuple_GET_SIZE(sequence);
  c10::SmallVector<int64_t, 8> out(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    out[static_cast<size_t>(i)] = THPUtils_unpackLong(PyTuple_GET_ITEM(sequence, i));
  }
  return out;
}

// _empty_strided(size: tuple, stride: tuple, dtype, device_index): a new accel
// tensor, as torch.empty_strided(size, stride, dtype=dtype,
// device=f"accel:{device_index}") gives, without argument parsing, a device
// string or the dispatcher. Inductor's generated code allocates its buffers
// with it, as it does with torch._C._dynamo.guards._empty_strided_cpu/_cuda
// on cpu and cuda.
PyObject* emptyStridedPy(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == 4, "_empty_strided takes 4 arguments (size, stride, dtype, device_index), got ", nargs);
  const auto size = unpackInts(args[0], "size");
  const auto stride = unpackInts(args[1], "stride");
  TORCH_CHECK_TYPE(THPDtype_Check(args[2]), "_empty_strided: dtype must be a torch.dtype");
  const auto dtype = reinterpret_cast<THPDtype*>(args[2])->scalar_type;
  const auto device = accelDevice(THPUtils_unpackLong(args[3]));
  return THPVariable_Wrap(emptyStrided(size, stride, dtype, device.index()));
  END_HANDLE_TH_ERRORS
}

// --- The device entry points of Inductor's generated wrappers ---------------
//
// A compiled graph's wrapper guards the device of its kernels, sets it and
// looks up the stream they launch on at every call. As torch.cuda's
// (torch.cuda._DeviceGuard over torch._C._cuda_exchangeDevice,
// torch._C._cuda_getCurrentRawStream), these are plain CPython functions
// and a CPython type: no pybind11 dispatch, no Python frames. Each
// initialises accel lazily (torch.accel._lazy_init, as the factory functions
// do) and checks its index with accel's error.

// An accel device index from a Python int.
c10::DeviceIndex unpackIndex(PyObject* index) {
  TORCH_CHECK_TYPE(
      THPUtils_checkLong(index), "Expected an accel device index (an int), but got ", Py_TYPE(index)->tp_name);
  return accelDevice(THPUtils_unpackLong(index)).index();
}

// torch.accel._exchange_device: -1 gives -1 and does nothing; any other
// index must name an accel device, which becomes current.
int64_t exchangeDevice(int64_t index) {
  if (index == -1) {
    return -1;
  }
  torch::utils::device_lazy_init(kAccel);
  return guard().exchangeDevice(accelDevice(index)).index();
}

// torch.accel._maybe_exchange_device: as exchangeDevice, without creating a
// context on the device.
int64_t maybeExchangeDevice(int64_t index) {
  if (index == -1) {
    return -1;
  }
  torch::utils::device_lazy_init(kAccel);
  return at::detail::getPrivateUse1Hooks().maybeExchangeDevice(accelDevice(index).index());
}

PyObject* exchangeDevicePy(PyObject* /*self*/, PyObject* index) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(THPUtils_checkLong(index), "_exchange_device expects an int device index");
  return THPUtils_packInt64(exchangeDevice(THPUtils_unpackLong(index)));
  END_HANDLE_TH_ERRORS
}

PyObject* maybeExchangeDevicePy(PyObject* /*self*/, PyObject* index) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(THPUtils_checkLong(index), "_maybe_exchange_device expects an int device index");
  return THPUtils_packInt64(maybeExchangeDevice(THPUtils_unpackLong(index)));
  END_HANDLE_TH_ERRORS
}

PyObject* setDevicePy(PyObject* /*self*/, PyObject* index) {
  HANDLE_TH_ERRORS
  const c10::DeviceIndex device = unpackIndex(index);
  torch::utils::device_lazy_init(kAccel);
  guard().setDevice(c10::Device(kAccel, device));
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

// The native handle of the current stream of accel:index (on the CUDA
// runtime, the cudaStream_t of the current CUDA stream: Triton launches on it).
PyObject* getRawStreamPy(PyObject* /*self*/, PyObject* index) {
  HANDLE_TH_ERRORS
  const c10::DeviceIndex device = unpackIndex(index);
  torch::utils::device_lazy_init(kAccel);
  const auto& g = guard();
  return PyLong_FromVoidPtr(g.getStreamNativeHandle(g.getStream(c10::Device(kAccel, device))));
  END_HANDLE_TH_ERRORS
}

// torch.accel._DeviceGuard(index): a context manager that makes accel:index
// current and restores the previous device on exit, as
// torch.cuda._DeviceGuard. Unlike torch.accel.device it takes only an int
// (-1: no-op), and it costs no Python frame.
struct DeviceGuardObject {
  PyObject_HEAD int64_t index;
  int64_t previous;
};

PyObject* deviceGuardNew(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(
      PyTuple_GET_SIZE(args) == 1 && (kwargs == nullptr || PyDict_GET_SIZE(kwargs) == 0),
      "_DeviceGuard takes one argument, the device index");
  PyObject* index = PyTuple_GET_ITEM(args, 0);
  TORCH_CHECK_TYPE(
      THPUtils_checkLong(index), "_DeviceGuard expects an int device index, but got ", Py_TYPE(index)->tp_name);
  const int64_t value = THPUtils_unpackLong(index);
  PyObject* self = type->tp_alloc(type, 0);
  if (self == nullptr) {
    return nullptr;
  }
  auto* guard_object = reinterpret_cast<DeviceGuardObject*>(self);
  guard_object->index = value;
  guard_object->previous = -1;
  return self;
  END_HANDLE_TH_ERRORS
}

PyObject* deviceGuardEnter(PyObject* self, PyObject* /*unused*/) {
  HANDLE_TH_ERRORS
  auto* guard_object = reinterpret_cast<DeviceGuardObject*>(self);
  guard_object->previous = exchangeDevice(guard_object->index);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* deviceGuardExit(PyObject* self, PyObject* const* /*args*/, Py_ssize_t /*nargs*/) {
  HANDLE_TH_ERRORS
  auto* guard_object = reinterpret_cast<DeviceGuardObject*>(self);
  guard_object->index = maybeExchangeDevice(guard_object->previous);
  Py_RETURN_FALSE;
  END_HANDLE_TH_ERRORS
}

PyMethodDef deviceGuardMethods[] = {
    {"__enter__", deviceGuardEnter, METH_NOARGS, nullptr},
    {"__exit__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&deviceGuardExit)), METH_FASTCALL, nullptr},
    {nullptr, nullptr, 0, nullptr},
};

PyMemberDef deviceGuardMembers[] = {
    {"idx", T_LONGLONG, offsetof(DeviceGuardObject, index), READONLY, nullptr},
    {"prev_idx", T_LONGLONG, offsetof(DeviceGuardObject, previous), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr},
};

PyTypeObject deviceGuardType = [] {
  PyTypeObject type{PyVarObject_HEAD_INIT(nullptr, 0)};
  type.tp_name = "torch_accel._C._DeviceGuard";
  type.tp_basicsize = sizeof(DeviceGuardObject);
  type.tp_flags = Py_TPFLAGS_DEFAULT;
  type.tp_doc = "Context manager that makes accel:index current and restores the previous device (an int; -1: no-op)";
  type.tp_new = deviceGuardNew;
  type.tp_methods = deviceGuardMethods;
  type.tp_members = deviceGuardMembers;
  return type;
}();

template <class Function> PyCFunction cFunction(Function function) {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(function));
}

PyMethodDef rawMethods[] = {
    {"_empty_strided", cFunction(&emptyStridedPy), METH_FASTCALL, nullptr},
    {"_exchange_device", exchangeDevicePy, METH_O, nullptr},
    {"_maybe_exchange_device", maybeExchangeDevicePy, METH_O, nullptr},
    {"_set_device", setDevicePy, METH_O, nullptr},
    {"_get_raw_stream", getRawStreamPy, METH_O, nullptr},
    {nullptr, nullptr, 0, nullptr},
};

// torch's own lazy initialisation of the target device type, where torch has
// one (torch.cuda._lazy_init on the CUDA runtime; the CPU has none). Accel
// work starts the target's runtime, and torch.<target> must know it did, as
// if it had started it itself: on CUDA, torch.cuda.is_initialized() is then
// True, its queued calls have run, and a forked child that uses torch.cuda
// gets torch's "Cannot re-initialize CUDA in forked subprocess" instead of
// raw CUDA errors. The module is imported already (by `import torch`), so
// this costs nothing until accel initialises.
void initializeTargetModule() {
  const c10::DeviceType target = runtime().targetType();
  if (!torch::utils::is_device_lazy_init_supported(target)) {
    return;
  }
  const py::module_ module = py::module_::import(("torch." + c10::DeviceTypeName(target, /*lower_case=*/true)).c_str());
  if (py::hasattr(module, "_lazy_init")) {
    module.attr("_lazy_init")();
  }
}

// The GPU trace's report runner (csrc/runtime/AccelTrace.h): a Python
// exception pending on this thread is set aside while PyTorch's hook runs
// Python, and restored after it, so that the report neither fails on it nor
// replaces it. The hook takes the GIL anyway; taking it here first (a no-op
// where the thread holds it) lets the pending exception be read safely.
void reportKeepingPendingPythonError(c10::function_ref<void()> report) {
  if (!Py_IsInitialized()) {
    report();
    return;
  }
  py::gil_scoped_acquire gil;
  PyObject* type = nullptr;
  PyObject* value = nullptr;
  PyObject* traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  report();
  PyErr_Restore(type, value, traceback);
}

} // namespace
} // namespace torch_accel

PYBIND11_MODULE(_C, m) {
  using namespace torch_accel;
  m.doc() = "Native core of torch_accel: the accel runtime, device guard, allocator and kernels";
  trace::report_runner.store(&reportKeepingPendingPythonError, std::memory_order_release);

  // Runtime selection and initialisation.
  m.def("_runtime_name", [] { return std::string(runtime().name()); });
  // Whether this build has the CUDA runtime (setup.py: a CUDA torch and a CUDA
  // toolkit, unless TORCH_ACCEL_BUILD_CUDA=0, as `make asan` and `make tsan`
  // build): without it, TORCH_ACCEL_RUNTIME=cuda is a configuration error.
#ifdef TORCH_ACCEL_WITH_CUDA
  m.attr("_has_cuda_runtime") = true;
#else
  m.attr("_has_cuda_runtime") = false;
#endif
  m.def("_target_device_type", [] { return c10::DeviceTypeName(runtime().targetType(), /*lower_case=*/true); });
  // What the runtime can do, for the Python code that must choose
  // (torch_accel/_core.py's capabilities(); Runtime.h's "Capabilities").
  m.def("_runtime_capabilities", [] {
    const Runtime& rt = runtime();
    py::dict capabilities;
    capabilities["host_memory"] = rt.memoryIsHostMemory();
    capabilities["inductor_kernels"] = rt.inductorKernels() == InductorKernels::Triton ? "triton" : "cpp";
    capabilities["compiles_triton"] = rt.compilesTriton();
    return capabilities;
  });
  // The stream sanitizer's view of the GPU trace (csrc/runtime/AccelTrace.h):
  // the id a stream is reported under, and the device type whose trace
  // reports accel memory.
  m.def("_trace_stream_id", [](int64_t stream_id, int64_t device_index) {
    return trace::streamId(static_cast<c10::DeviceIndex>(device_index), stream_id);
  });
  // Where torch.accel.nvtx's ranges go besides the profiler (the runtime's
  // annotations: "nvtx", "itt" or "none").
  m.def("_profiler_annotations", [] {
    switch (runtime().profilerAnnotations()) {
    case ProfilerAnnotations::Nvtx:
      return "nvtx";
    case ProfilerAnnotations::Itt:
      return "itt";
    case ProfilerAnnotations::None:
      break;
    }
    return "none";
  });
  m.def("_memory_trace_device_type", [] {
    return c10::DeviceTypeName(runtime().memoryTraceDeviceType(), /*lower_case=*/true);
  });
  // Forked after initialisation: the runtime's own flag (set whenever the
  // runtime initialised) or torch's (set when Python initialised accel).
  const auto in_bad_fork = [] { return inBadFork() || torch::utils::is_device_in_bad_fork(kAccel); };
  m.def("_init", [in_bad_fork] {
    if (in_bad_fork()) {
      detail::throwInBadFork();
    }
    checkDeviceAvailable();
    initializeTargetModule();
    // What a program without Python runs too (csrc/aten/Initialization.cpp).
    torch_accel::init();
    // A child forked after this point finds accel poisoned and, on its next
    // accel factory call, goes through torch.accel._lazy_init again (and fails).
    torch::utils::register_fork_handler_for_device_init(kAccel);
  });
  m.def("_is_in_bad_fork", in_bad_fork);
  m.def("_load_aoti_shim", [] { torch_accel::inductor::loadAOTIShim(); });
  // What ATen's from_blob asks for an accel pointer given without a device
  // index (at::Context::getDeviceFromPtr): the accel device of the memory.
  m.def("_device_from_pointer", [](uintptr_t ptr) {
    return at::globalContext().getDeviceFromPtr(reinterpret_cast<void*>(ptr), kAccel).index();
  });

  // Devices.
  m.def("_device_count", [] { return guard().deviceCount(); });
  m.def("_get_device", [] { return guard().getDevice().index(); });
  m.def("_check_device_index", [](int64_t device) { checkDeviceIndex(device); });
  // _set_device, _exchange_device, _maybe_exchange_device: rawMethods below.
  m.def("_synchronize", [](int64_t device) {
    const auto index = accelDevice(device).index();
    py::gil_scoped_release no_gil;
    guard().synchronizeDevice(index);
  });
  m.def(
      "_has_primary_context", [](int64_t device) { return runtime().hasPrimaryContext(accelDevice(device).index()); });
  m.def("_get_device_properties", [](int64_t device) {
    return toDict(runtime().getDeviceProperties(accelDevice(device).index()));
  });
  m.def("_supported_dtypes", [](int64_t device) {
    // The scalar types the device's kernels support natively, by name.
    const auto capability = guard().getDeviceCapability(accelDevice(device));
    std::vector<std::string> names;
#define TORCH_ACCEL_SUPPORTED(_, name)                                                                                 \
  if (capability.capability_data.supported_scalar_types.has_##name) {                                                  \
    names.emplace_back(#name);                                                                                         \
  }
    AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS(TORCH_ACCEL_SUPPORTED)
#undef TORCH_ACCEL_SUPPORTED
    return names;
  });

  // Streams.
  m.def("_get_current_stream", [](int64_t device) { return pack(guard().getStream(accelDevice(device))); });
  m.def("_get_default_stream", [](int64_t device) { return pack(guard().getDefaultStream(accelDevice(device))); });
  m.def("_set_stream", [](int64_t stream_id, int64_t device_index, int64_t device_type) {
    // As torch.cuda.set_stream: the stream becomes current on its device,
    // and its device becomes the current device.
    const c10::Stream stream = unpack(stream_id, device_index, device_type);
    guard().exchangeStream(stream);
    guard().setDevice(stream.device());
  });
  m.def("_exchange_stream", [](int64_t stream_id, int64_t device_index, int64_t device_type) {
    return pack(guard().exchangeStream(unpack(stream_id, device_index, device_type)));
  });
  // _get_raw_stream: rawMethods below.
  m.def("_get_stream_handle", [](int64_t stream_id, int64_t device_index, int64_t device_type) {
    return reinterpret_cast<intptr_t>(guard().getStreamNativeHandle(unpack(stream_id, device_index, device_type)));
  });
  // torch.Event.elapsed_time accepts only exact torch.Event instances as
  // `other`; torch.accel.Event subclasses it (isinstance checks, torch.cuda's
  // constructor signature), so it measures through here instead.
  m.def("_event_elapsed_time", [](py::handle start, py::handle end) {
    TORCH_CHECK_TYPE(
        THPEvent_Check(start.ptr()) && THPEvent_Check(end.ptr()), "elapsed_time expects two torch.Event objects");
    const auto& start_event = reinterpret_cast<THPEvent*>(start.ptr())->event;
    const auto& end_event = reinterpret_cast<THPEvent*>(end.ptr())->event;
    return start_event.elapsedTime(end_event);
  });
  m.def("_stream_priority_range", [] {
    checkNotInBadFork();
    return runtime().streamPriorityRange();
  });
  m.def("_stream_priority", [](int64_t stream_id, int64_t device_index, int64_t device_type) {
    checkNotInBadFork();
    checkDeviceIndex(device_index);
    return runtime().streamPriority(unpack(stream_id, device_index, device_type));
  });

  // Memory (the device allocator's statistics, per accel device).
  m.def("_memory_stats", [](int64_t device) {
    return statsToDict(allocatorFor(device)->getDeviceStats(static_cast<c10::DeviceIndex>(device)));
  });
  m.def("_reset_peak_memory_stats", [](int64_t device) {
    allocatorFor(device)->resetPeakStats(static_cast<c10::DeviceIndex>(device));
  });
  m.def("_reset_accumulated_memory_stats", [](int64_t device) {
    allocatorFor(device)->resetAccumulatedStats(static_cast<c10::DeviceIndex>(device));
  });
  m.def("_empty_cache", [] { runtime().allocator()->emptyCache(); });
  m.def("_mem_get_info", [](int64_t device) {
    return allocatorFor(device)->getMemoryInfo(static_cast<c10::DeviceIndex>(device));
  });
  initMemoryBindings(m);
  initFaultInjectionBindings(m);

  m.def("_alias_fallback_calls", [] { return targetCallCount(); });
  initTargetViewBindings(m);
  initInteropBindings(m);

  // What Inductor's generated code calls on every graph call (allocation,
  // device guards, streams): plain CPython, no pybind11 overhead.
  if (PyModule_AddFunctions(m.ptr(), rawMethods) != 0 || PyType_Ready(&deviceGuardType) != 0) {
    throw py::error_already_set();
  }
  Py_INCREF(&deviceGuardType);
  if (PyModule_AddObject(m.ptr(), "_DeviceGuard", reinterpret_cast<PyObject*>(&deviceGuardType)) != 0) {
    Py_DECREF(&deviceGuardType);
    throw py::error_already_set();
  }

#ifdef TORCH_ACCEL_WITH_DISTRIBUTED
  initDistributedBindings(m);
#endif
  initMultiprocessingBindings(m);
  initInterprocessEventBindings(m);
  initGraphBindings(m);

  // Random number generators.
  m.def("_default_generator", [](int64_t device) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(defaultAccelGenerator(accelDevice(device).index())));
  });
}
