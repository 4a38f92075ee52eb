#pragma once

// The device allocator of a runtime, with what torch.accel.memory observes
// and bounds beyond c10::DeviceAllocator: a snapshot of the allocator's
// segments and blocks, the history of what it did (torch.accel.memory.
// _record_memory_history / _snapshot), observers called when an allocation
// fails, and a per-process cap on the memory it may hold
// (set_per_process_memory_fraction).
//
// The records are c10's device-neutral ones (SegmentInfo, BlockInfo,
// TraceEntry), the same CUDA's caching allocator reports, so one converter
// above the runtime interface turns either runtime's snapshot into the
// dictionary PyTorch's memory visualiser (torch/cuda/_memory_viz.py) reads.

#include <c10/core/CachingDeviceAllocator.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace torch_accel {

// Called when an allocation fails, before the OutOfMemoryError is raised,
// with torch.cuda's arguments: the device, the bytes requested, the bytes
// the process may use on the device (its total, or the cap set by the
// memory fraction) and the bytes the device reports free.
using OutOfMemoryObserver =
    std::function<void(int64_t device, size_t allocated, size_t device_total, size_t device_free)>;

struct MemorySnapshot {
  // Every segment of every device, in address order.
  std::vector<c10::CachingDeviceAllocator::SegmentInfo> segments;
  // One list per device, oldest entry first; empty unless history is recorded.
  std::vector<std::vector<c10::CachingDeviceAllocator::TraceEntry>> device_traces;
};

class ObservableAllocator : public c10::DeviceAllocator {
public:
  // Starts (enabled) or stops recording. While recording, the allocator keeps
  // up to `max_entries` trace entries per device (the newest) and, as `when`
  // says, the context `context_recorder` gathers for live blocks, allocations
  // and frees. Actions named in `skip_actions` (TraceEntry's names) are not
  // recorded.
  virtual void recordHistory(
      bool enabled,
      c10::CachingDeviceAllocator::CreateContextFn context_recorder,
      size_t max_entries,
      c10::CachingDeviceAllocator::RecordContext when,
      bool clear_history,
      const std::vector<std::string>& skip_actions) = 0;

  // The segments of memory pool `pool` ({0, 0}: every segment), and the
  // history if `include_traces`.
  virtual MemorySnapshot snapshot(bool include_traces, c10::MempoolId_t pool = {0, 0}) = 0;

  virtual void attachOutOfMemoryObserver(OutOfMemoryObserver observer) = 0;

  // Caps the memory the allocator may hold on `device` at `fraction` (0 to 1)
  // of the device's total memory; an allocation beyond it raises
  // OutOfMemoryError.
  virtual void setMemoryFraction(double fraction, c10::DeviceIndex device) = 0;
  virtual double getMemoryFraction(c10::DeviceIndex device) = 0;
};

} // namespace torch_accel
