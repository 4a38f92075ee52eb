#pragma once

#include <csrc/runtime/Runtime.h>

#include <c10/core/Allocator.h>
#include <c10/core/StorageImpl.h>

namespace torch_accel {

// The CUDA runtime's side of Runtime::shareStorage / openSharedStorage /
// reuseSharedStorage: CUDA IPC handles of the caching allocator's blocks,
// with torch's reference counting for shared cuda storages (see
// CudaSharedMemory.cpp).
SharedStorageHandle shareCudaStorage(c10::StorageImpl& storage);
c10::DataPtr openCudaSharedStorage(const SharedStorageHandle& handle, c10::DeviceIndex device);
void reuseCudaSharedStorage(const SharedStorageHandle& handle, c10::DeviceIndex device);

// Runtime::collectSharedMemory: the sent memory that torch keeps for its
// receivers (cuda's and accel's alike) and that they all released.
void collectCudaSharedMemory();

} // namespace torch_accel
