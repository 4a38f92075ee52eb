#pragma once

#include <csrc/runtime/Runtime.h>

#include <c10/core/Allocator.h>
#include <c10/core/StorageImpl.h>

namespace torch_accel {

// The host runtime's side of Runtime::shareStorage / openSharedStorage: accel
// memory in POSIX shared memory segments, passed between processes by file
// descriptor (see HostSharedMemory.cpp).
SharedStorageHandle shareHostStorage(c10::StorageImpl& storage);
c10::DataPtr openHostSharedStorage(const SharedStorageHandle& handle, c10::DeviceIndex device);

} // namespace torch_accel
