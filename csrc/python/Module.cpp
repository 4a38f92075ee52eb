// torch_accel._C: the Python-facing entry points of the runtime. The Python
// package (torch_accel/) builds torch.accel's API on these; streams and events
// themselves are PyTorch's generic torch.Stream / torch.Event, which reach the
// runtime through the PrivateUse1 device guard.

#include <csrc/aten/AliasFallback.h>
#include <csrc/aten/Empty.h>
#include <csrc/aten/FusedRnnCells.h>
#include <csrc/aten/TargetCall.h>
#ifdef TORCH_ACCEL_WITH_DISTRIBUTED
#include <csrc/python/Distributed.h>
#endif
#include <csrc/python/Memory.h>
#include <csrc/runtime/AccelGenerator.h>
#include <csrc/runtime/Runtime.h>

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

#include <string>
#include <tuple>
#include <vector>

namespace torch_accel {
namespace {

namespace py = pybind11;

constexpr auto kAccel = c10::DeviceType::PrivateUse1;

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

PyMethodDef rawMethods[] = {
    {"_empty_strided",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&emptyStridedPy)),
     METH_FASTCALL,
     nullptr},
    {nullptr, nullptr, 0, nullptr},
};

} // namespace
} // namespace torch_accel

PYBIND11_MODULE(_C, m) {
  using namespace torch_accel;
  m.doc() = "Native core of torch_accel: the accel runtime, device guard, allocator and kernels";

  // Runtime selection and initialisation.
  m.def("_runtime_name", [] { return std::string(runtime().name()); });
  m.def("_target_device_type", [] { return c10::DeviceTypeName(runtime().targetType(), /*lower_case=*/true); });
  // Forked after initialisation: the runtime's own flag (set whenever the
  // runtime initialised) or torch's (set when Python initialised accel).
  const auto in_bad_fork = [] { return inBadFork() || torch::utils::is_device_in_bad_fork(kAccel); };
  m.def("_init", [in_bad_fork] {
    if (in_bad_fork()) {
      detail::throwInBadFork();
    }
    checkDeviceAvailable();
    at::globalContext().lazyInitDevice(kAccel);
    preferTargetKernels();
    provideFusedRnnCellsTheTargetLacks();
    // A child forked after this point finds accel poisoned and, on its next
    // accel factory call, goes through torch.accel._lazy_init again (and fails).
    torch::utils::register_fork_handler_for_device_init(kAccel);
  });
  m.def("_is_in_bad_fork", in_bad_fork);

  // Devices.
  m.def("_device_count", [] { return guard().deviceCount(); });
  m.def("_get_device", [] { return guard().getDevice().index(); });
  m.def("_check_device_index", [](int64_t device) { checkDeviceIndex(device); });
  m.def("_set_device", [](int64_t device) { guard().setDevice(accelDevice(device)); });
  m.def("_exchange_device", [](int64_t device) { return guard().exchangeDevice(accelDevice(device)).index(); });
  m.def("_maybe_exchange_device", [](int64_t device) {
    return at::detail::getPrivateUse1Hooks().maybeExchangeDevice(accelDevice(device).index());
  });
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
  m.def("_get_raw_stream", [](int64_t device) {
    return reinterpret_cast<intptr_t>(guard().getStreamNativeHandle(guard().getStream(accelDevice(device))));
  });
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

  m.def("_alias_fallback_calls", [] { return targetCallCount(); });

  // Allocation for Inductor's generated code (plain CPython: no pybind11 overhead).
  if (PyModule_AddFunctions(m.ptr(), rawMethods) != 0) {
    throw py::error_already_set();
  }

#ifdef TORCH_ACCEL_WITH_DISTRIBUTED
  initDistributedBindings(m);
#endif

  // Random number generators.
  m.def("_default_generator", [](int64_t device) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(defaultAccelGenerator(accelDevice(device).index())));
  });
}
