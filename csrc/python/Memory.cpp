// Memory observability for Python, whichever runtime runs: both runtimes'
// allocators report c10's records (csrc/runtime/ObservableAllocator.h), and
// this file turns them into the dictionary torch.cuda.memory._snapshot
// returns, which PyTorch's memory visualiser (torch/cuda/_memory_viz.py,
// pytorch.org/memory_viz) reads. Stack traces are torch's CapturedTraceback,
// as CUDA's: Python (and TorchScript) frames, and C++ frames on request.

#include <csrc/python/Memory.h>
#include <csrc/runtime/Runtime.h>

#include <c10/core/AllocatorConfig.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/combined_traceback.h>
#include <torch/csrc/profiler/unwind/unwind.h>

#include <algorithm>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace torch_accel {
namespace {

namespace py = pybind11;
using c10::CachingDeviceAllocator::RecordContext;
using c10::CachingDeviceAllocator::TraceEntry;

std::shared_ptr<c10::GatheredContext> gatherPythonFrames() {
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/true, /*cpp=*/false);
}

std::shared_ptr<c10::GatheredContext> gatherPythonAndCppFrames() {
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/true, /*cpp=*/true);
}

// Turns the approximate clock of trace entries into Unix time. Created when
// recording first starts, so that it is calibrated before the first entry.
c10::ApproximateClockToUnixTimeConverter& clockConverter() {
  static c10::ApproximateClockToUnixTimeConverter converter;
  return converter;
}

void checkOption(
    const char* argument,
    const std::optional<std::string>& value,
    std::initializer_list<const char*> valid,
    bool none_allowed) {
  if (!value.has_value()) {
    TORCH_CHECK_VALUE(none_allowed, "torch.accel.memory._record_memory_history: ", argument, " must not be None");
    return;
  }
  const bool ok = std::any_of(valid.begin(), valid.end(), [&](const char* v) { return *value == v; });
  std::string expected;
  for (const char* v : valid) {
    expected += expected.empty() ? "" : ", ";
    expected += std::string("'") + v + "'";
  }
  TORCH_CHECK_VALUE(
      ok,
      "torch.accel.memory._record_memory_history: expected ",
      argument,
      " to be one of ",
      expected,
      none_allowed ? " or None" : "",
      ", got '",
      *value,
      "'");
}

// torch.cuda.memory._record_memory_history's semantics: `enabled` "state"
// keeps live blocks' contexts only (one trace entry), "all" a history of up
// to `max_entries` entries; `context` says which events keep a stack trace;
// `stacks` "all" adds C++ frames to the Python ones.
void recordMemoryHistory(
    const std::optional<std::string>& enabled,
    const std::optional<std::string>& context,
    const std::string& stacks,
    size_t max_entries,
    bool clear_history,
    const std::vector<std::string>& skip_actions) {
  checkOption("enabled", enabled, {"state", "all"}, /*none_allowed=*/true);
  checkOption("context", context, {"state", "alloc", "all"}, /*none_allowed=*/true);
  checkOption("stacks", stacks, {"python", "all"}, /*none_allowed=*/false);
  for (const auto& action : skip_actions) {
    try {
      c10::CachingDeviceAllocator::parseTraceEntryAction(action);
    } catch (const c10::Error&) {
      TORCH_CHECK_VALUE(
          false,
          "torch.accel.memory._record_memory_history: unknown action '",
          action,
          "' in skip_actions (expected alloc, free_requested, free_completed, segment_alloc, segment_free, "
          "segment_map, segment_unmap, snapshot or oom)");
    }
  }
  auto recorder = &gatherPythonFrames;
  if (enabled && stacks == "all") {
    recorder = &gatherPythonAndCppFrames;
    torch::unwind::unwind(); // warms up C++ unwinding before the first allocation
  }
  RecordContext when = RecordContext::NEVER;
  if (context == "state") {
    when = RecordContext::STATE;
  } else if (context == "alloc") {
    when = RecordContext::ALLOC;
  } else if (context == "all") {
    when = RecordContext::ALL;
  }
  clockConverter();
  runtime().allocator()->recordHistory(
      enabled.has_value(), recorder, enabled == "all" ? max_entries : 1, when, clear_history, skip_actions);
}

const char* actionName(TraceEntry::Action action) {
  switch (action) {
  case TraceEntry::ALLOC:
    return "alloc";
  case TraceEntry::FREE_REQUESTED:
    return "free_requested";
  case TraceEntry::FREE_COMPLETED:
    return "free_completed";
  case TraceEntry::SEGMENT_ALLOC:
    return "segment_alloc";
  case TraceEntry::SEGMENT_FREE:
    return "segment_free";
  case TraceEntry::SEGMENT_MAP:
    return "segment_map";
  case TraceEntry::SEGMENT_UNMAP:
    return "segment_unmap";
  case TraceEntry::SNAPSHOT:
    return "snapshot";
  case TraceEntry::OOM:
    return "oom";
  }
  TORCH_INTERNAL_ASSERT(false, "unknown TraceEntry action ", static_cast<int>(action));
}

// The allocator settings in force, as CUDA's snapshot reports its own.
py::dict allocatorSettings() {
  using Config = c10::CachingAllocator::AcceleratorAllocatorConfig;
  py::dict settings;
  settings["PYTORCH_ALLOC_CONF"] = Config::last_allocator_settings();
  settings["max_split_size"] = static_cast<int64_t>(Config::max_split_size());
  settings["garbage_collection_threshold"] = Config::garbage_collection_threshold();
  settings["expandable_segments"] = Config::use_expandable_segments();
  py::dict roundup;
  size_t interval = 1;
  for (const size_t divisions : Config::roundup_power2_divisions()) {
    roundup[py::str(std::to_string(interval))] = divisions;
    interval *= 2;
  }
  settings["roundup_power2_divisions"] = roundup;
  return settings;
}

py::dict snapshotToPython(const MemorySnapshot& snapshot) {
  // Stack traces are symbolized in one batch at the end, each distinct
  // traceback once (a block, its segment and its trace entries share one).
  std::vector<torch::CapturedTraceback*> tracebacks;
  std::unordered_map<torch::CapturedTraceback*, size_t> traceback_index;
  std::vector<std::pair<py::dict, size_t>> frames_owners;
  const auto addFrames = [&](py::dict& d, const std::shared_ptr<c10::GatheredContext>& context) {
    auto* traceback = dynamic_cast<torch::CapturedTraceback*>(context.get());
    if (traceback == nullptr) {
      d["frames"] = py::list();
      return;
    }
    const auto [it, inserted] = traceback_index.emplace(traceback, tracebacks.size());
    if (inserted) {
      tracebacks.push_back(traceback);
    }
    frames_owners.emplace_back(d, it->second);
  };

  py::list segments;
  for (const auto& segment : snapshot.segments) {
    py::dict s;
    s["device"] = segment.device;
    s["address"] = segment.address;
    s["total_size"] = segment.total_size;
    s["allocated_size"] = segment.allocated_size;
    s["active_size"] = segment.active_size;
    s["requested_size"] = segment.requested_size;
    s["stream"] = reinterpret_cast<int64_t>(segment.stream);
    s["segment_type"] = segment.is_large ? "large" : "small";
    s["segment_pool_id"] = py::make_tuple(segment.owner_private_pool_id.first, segment.owner_private_pool_id.second);
    s["is_expandable"] = segment.is_expandable;
    addFrames(s, segment.context_when_allocated);
    py::list blocks;
    size_t address = segment.address;
    for (const auto& block : segment.blocks) {
      py::dict b;
      b["address"] = address;
      b["size"] = block.size;
      b["requested_size"] = block.requested_size;
      b["state"] = block.allocated ? "active_allocated" : (block.active ? "active_pending_free" : "inactive");
      addFrames(b, block.context_when_allocated);
      blocks.append(b);
      address += block.size;
    }
    s["blocks"] = blocks;
    segments.append(s);
  }

  const auto to_unix_ns = clockConverter().makeConverter();
  py::list device_traces;
  for (const auto& entries : snapshot.device_traces) {
    py::list trace;
    for (const auto& entry : entries) {
      py::dict e;
      e["action"] = actionName(entry.action_);
      // An OOM entry's address field holds the device's free bytes.
      e[entry.action_ == TraceEntry::OOM ? "device_free" : "addr"] = entry.addr_;
      e["size"] = entry.size_;
      e["stream"] = reinterpret_cast<int64_t>(entry.stream_);
      e["time_us"] = to_unix_ns(entry.time_.approx_t_) / 1000;
      e["compile_context"] = entry.compile_context_;
      e["user_metadata"] = entry.user_metadata_;
      addFrames(e, entry.context_);
      trace.append(e);
    }
    device_traces.append(trace);
  }

  const auto symbolized = torch::symbolize(tracebacks);
  std::vector<py::dict> frames;
  frames.reserve(symbolized.all_frames.size());
  for (const auto& frame : symbolized.all_frames) {
    py::dict f;
    f["filename"] = frame.filename;
    f["line"] = frame.lineno;
    f["name"] = frame.funcname;
    frames.push_back(std::move(f));
  }
  std::vector<py::list> traceback_frames;
  traceback_frames.reserve(symbolized.tracebacks.size());
  for (const auto& indices : symbolized.tracebacks) {
    py::list list;
    for (const uint64_t index : indices) {
      list.append(frames.at(index));
    }
    traceback_frames.push_back(std::move(list));
  }
  for (auto& [owner, index] : frames_owners) {
    owner["frames"] = traceback_frames.at(index);
  }

  py::dict result;
  result["segments"] = segments;
  result["device_traces"] = device_traces;
  result["allocator_settings"] = allocatorSettings();
  result["external_annotations"] = py::list();
  return result;
}

} // namespace

void initMemoryBindings(py::module& m) {
  m.def(
      "_record_memory_history",
      [](std::optional<std::string> enabled,
         std::optional<std::string> context,
         const std::string& stacks,
         size_t max_entries,
         bool clear_history,
         const std::vector<std::string>& skip_actions) {
        recordMemoryHistory(enabled, context, stacks, max_entries, clear_history, skip_actions);
      });
  m.def(
      "_memory_snapshot",
      [](bool include_traces, c10::MempoolId_t pool) {
        // Taken without the GIL (the allocator's lock is held meanwhile, and a
        // thread holding it may be waiting for the GIL to gather a traceback);
        // converted with it.
        MemorySnapshot snapshot;
        {
          py::gil_scoped_release no_gil;
          snapshot = runtime().allocator()->snapshot(include_traces, pool);
        }
        return snapshotToPython(snapshot);
      },
      py::arg("include_traces"),
      py::arg("pool") = c10::MempoolId_t{0, 0});

  // Memory pools and pluggable allocators (torch_accel/memory.py: MemPool,
  // use_mem_pool, AccelPluggableAllocator, change_current_allocator).
  py::class_<PluggableAllocator, std::shared_ptr<PluggableAllocator>>(m, "_PluggableAllocator");
  m.def("_pluggable_allocator", [](uintptr_t alloc_fn, uintptr_t free_fn) {
    TORCH_CHECK_VALUE(alloc_fn != 0 && free_fn != 0, "accel: a pluggable allocator needs both functions");
    return runtime().newPluggableAllocator(alloc_fn, free_fn);
  });
  m.def("_change_current_allocator", [](const std::shared_ptr<PluggableAllocator>& allocator) {
    runtime().changeCurrentAllocator(allocator);
  });
  m.def(
      "_mem_pool_create",
      [](int64_t device,
         c10::MempoolId_t id,
         const std::shared_ptr<PluggableAllocator>& allocator,
         bool use_on_oom,
         bool no_split) {
        checkDeviceIndex(device);
        runtime().createPool(static_cast<c10::DeviceIndex>(device), id, allocator, use_on_oom, no_split);
      });
  m.def("_mem_pool_release", [](int64_t device, c10::MempoolId_t id) {
    checkDeviceIndex(device);
    runtime().releasePool(static_cast<c10::DeviceIndex>(device), id);
  });
  m.def("_mem_pool_use_count", [](int64_t device, c10::MempoolId_t id) {
    checkDeviceIndex(device);
    return runtime().poolUseCount(static_cast<c10::DeviceIndex>(device), id);
  });
  m.def("_begin_allocate_current_thread_to_pool", [](int64_t device, c10::MempoolId_t id) {
    checkDeviceIndex(device);
    runtime().beginAllocateCurrentThreadToPool(static_cast<c10::DeviceIndex>(device), id);
  });
  m.def("_end_allocate_to_pool", [](int64_t device, c10::MempoolId_t id) {
    checkDeviceIndex(device);
    runtime().endAllocateToPool(static_cast<c10::DeviceIndex>(device), id);
  });
  m.def("_empty_pool_cache", [](c10::MempoolId_t id) { runtime().allocator()->emptyCache(id); });
  m.def("_attach_out_of_memory_observer", [](const py::object& observer) {
    TORCH_CHECK_TYPE(
        PyCallable_Check(observer.ptr()),
        "torch.accel.memory.attach_out_of_memory_observer expects a callable, got ",
        Py_TYPE(observer.ptr())->tp_name);
    // The allocator may call it at any time until the process ends, even
    // during interpreter shutdown, so it is kept alive for good.
    PyObject* callable = observer.inc_ref().ptr();
    runtime().allocator()->attachOutOfMemoryObserver(
        [callable](int64_t device, size_t allocated, size_t device_total, size_t device_free) {
          py::gil_scoped_acquire gil;
          try {
            py::handle observer_handle(callable);
            observer_handle(device, allocated, device_total, device_free);
          } catch (py::error_already_set& e) {
            // The allocation raises OutOfMemoryError whatever an observer
            // does: an observer's own error is reported, not raised instead.
            TORCH_WARN("accel: an out-of-memory observer raised ", e.what());
          }
        });
  });
  m.def("_set_memory_fraction", [](double fraction, int64_t device) {
    checkDeviceIndex(device);
    runtime().allocator()->setMemoryFraction(fraction, static_cast<c10::DeviceIndex>(device));
  });
  m.def("_get_memory_fraction", [](int64_t device) {
    checkDeviceIndex(device);
    return runtime().allocator()->getMemoryFraction(static_cast<c10::DeviceIndex>(device));
  });
}

} // namespace torch_accel
