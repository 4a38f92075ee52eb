#pragma once

#include <csrc/runtime/ObservableAllocator.h>
#include <csrc/runtime/host/HostMemoryLedger.h>

#include <c10/core/Allocator.h>

#include <cstddef>

namespace torch_accel {

// accelrt device memory, handed out as DataPtrs that name accel devices.
ObservableAllocator* hostAllocator();

// `nbytes` of accelrt memory on the current accel device, in a DataPtr that
// names `label` (accel for accel storages, CPU while a CPU kernel fills it for
// the alias fallback). Out of memory raises torch.OutOfMemoryError naming the
// accel device.
c10::DataPtr allocateAccelrtMemory(size_t nbytes, c10::Device label);

// Frees memory from allocateAccelrtMemory (its base pointer); null is a no-op.
void freeAccelrtMemory(void* ptr) noexcept;

// Makes `source` (null: accelrt) where every segment outside a memory pool
// with a source of its own comes from (changeCurrentAllocator); only before
// the first allocation.
void setDefaultSegmentSource(std::shared_ptr<const HostSegmentSource> source);

// Whether `ptr` came from allocateAccelrtMemory (whatever device it names).
bool isAccelrtMemory(const c10::DataPtr& ptr);

// The accel device of the live allocation from allocateAccelrtMemory at
// `ptr` (its base pointer); -1 for any other pointer.
c10::DeviceIndex accelrtMemoryDevice(void* ptr);

} // namespace torch_accel
