// accel memory that other processes can map, on the host runtime.
//
// accelrt's allocations are private to their process. To share a storage, its
// bytes move once into a POSIX shared memory segment (as torch.multiprocessing
// moves a CPU storage's) and the storage's DataPtr is swapped for one over the
// segment, labelled with the same accel device: every tensor over the storage
// keeps its contents and from then on reads and writes the shared memory. A
// storage already in a segment is shared again without a copy.
//
// The segment is unlinked at once and kept by file descriptor: it lives while
// any process maps it or holds a descriptor of it (the sender's storage, each
// receiver's storage, descriptors in transit), so a receiver keeps using the
// memory after the sender freed its tensor, and nothing outlives the processes
// that die. Memory moved into a segment is no longer accelrt's: the memory
// statistics of the device stop counting it.
//
// accelrt's device memory is host memory and its stream operations complete
// before returning, so the bytes can be copied here directly, with no work in
// flight on them.

#include <csrc/core/AccelDevice.h>
#include <csrc/runtime/host/HostSharedMemory.h>

#include <ATen/MapAllocator.h>
#include <c10/util/Exception.h>

#include <cerrno>
#include <cstring>
#include <unistd.h>

namespace torch_accel {
namespace {} // namespace

SharedStorageHandle shareHostStorage(c10::StorageImpl& storage) {
  const size_t nbytes = storage.nbytes();
  TORCH_CHECK(nbytes > 0, "accel: an empty storage has no memory to share");
  if (auto* segment = at::MapAllocator::fromDataPtr(storage.data_ptr())) {
    SharedStorageHandle handle;
    handle.fd = segment->fd();
    handle.nbytes = nbytes;
    return handle;
  }
  const int flags = at::ALLOCATOR_MAPPED_SHAREDMEM | at::ALLOCATOR_MAPPED_EXCLUSIVE | at::ALLOCATOR_MAPPED_KEEPFD |
                    at::ALLOCATOR_MAPPED_UNLINK;
  c10::DataPtr shared = at::MapAllocator::makeDataPtr(at::NewProcessWideShmHandle(), flags, nbytes, nullptr);
  std::memcpy(shared.get(), storage.data(), nbytes);
  shared.unsafe_set_device(storage.device());
  auto* segment = at::MapAllocator::fromDataPtr(shared);
  const int fd = segment->fd();
  // Frees the accelrt memory.
  storage.set_data_ptr_noswap(std::move(shared));
  SharedStorageHandle handle;
  handle.fd = fd;
  handle.nbytes = nbytes;
  return handle;
}

c10::DataPtr openHostSharedStorage(const SharedStorageHandle& handle, c10::DeviceIndex device) {
  TORCH_CHECK(handle.fd >= 0, "accel (host runtime): a shared accel storage needs a file descriptor, got ", handle.fd);
  // The mapping keeps its own descriptor; the caller closes the one it passed.
  const int fd = ::dup(handle.fd);
  TORCH_CHECK(
      fd != -1, "accel (host runtime): could not duplicate the shared memory descriptor: ", std::strerror(errno));
  const int flags = at::ALLOCATOR_MAPPED_SHAREDMEM | at::ALLOCATOR_MAPPED_NOCREATE | at::ALLOCATOR_MAPPED_KEEPFD |
                    at::ALLOCATOR_MAPPED_FROMFD;
  c10::DataPtr mapped;
  try {
    mapped = at::MapAllocator::makeDataPtr(at::WITH_FD, "", fd, flags, handle.nbytes, nullptr);
  } catch (...) {
    ::close(fd);
    throw;
  }
  mapped.unsafe_set_device(c10::Device(kAccel, device));
  return mapped;
}

} // namespace torch_accel
