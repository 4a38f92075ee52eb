// torch_accel._C's entry points for sharing accel storages between processes
// (torch_accel/multiprocessing.py). The runtime decides how memory is shared
// (Runtime::shareStorage); these only move storages and handles across the
// Python boundary.

#include <csrc/core/AccelDevice.h>
#include <csrc/python/Multiprocessing.h>
#include <csrc/runtime/Runtime.h>

#include <c10/core/StorageImpl.h>
#include <torch/csrc/Storage.h>
#include <torch/csrc/utils/pybind.h>

#include <string>
#include <tuple>

namespace torch_accel {
namespace {

namespace py = pybind11;

const c10::Storage& accelStorage(py::handle obj) {
  TORCH_CHECK_TYPE(THPStorage_Check(obj.ptr()), "expected a torch.UntypedStorage, got ", Py_TYPE(obj.ptr())->tp_name);
  const c10::Storage& storage = THPStorage_Unpack(obj.ptr());
  TORCH_CHECK(storage.device_type() == kAccel, "expected an accel storage, got a storage on ", storage.device().str());
  return storage;
}

} // namespace

void initMultiprocessingBindings(py::module& m) {
  // (fd, runtime handle bytes, nbytes, cache key) of a non-empty accel storage, whose
  // memory the runtime may first move into memory other processes can map.
  m.def("_share_storage", [](py::handle obj) {
    checkNotInBadFork();
    const c10::Storage& storage = accelStorage(obj);
    SharedStorageHandle handle;
    {
      py::gil_scoped_release no_gil;
      handle = runtime().shareStorage(*storage.unsafeGetStorageImpl());
    }
    return std::make_tuple(handle.fd, py::bytes(handle.handle), handle.nbytes, py::bytes(handle.key));
  });

  // A new accel storage over memory another process shared (the tuple
  // _share_storage returned there, its fd received here), on accel:`device`.
  // Like cuda's shared storages, it cannot be resized.
  m.def("_open_shared_storage", [](int fd, const py::bytes& runtime_handle, uint64_t nbytes, int64_t device) {
    checkNotInBadFork();
    checkDeviceIndex(device);
    SharedStorageHandle handle;
    handle.fd = fd;
    handle.handle = std::string(runtime_handle);
    handle.nbytes = nbytes;
    c10::DataPtr memory = runtime().openSharedStorage(handle, static_cast<c10::DeviceIndex>(device));
    c10::Storage storage(c10::make_intrusive<c10::StorageImpl>(
        c10::StorageImpl::use_byte_size_t(),
        static_cast<size_t>(nbytes),
        std::move(memory),
        /*allocator=*/nullptr,
        /*resizable=*/false));
    return py::reinterpret_steal<py::object>(THPStorage_Wrap(std::move(storage)));
  });

  // A storage received again (or sent back to its sender), already mapped
  // here: orders accel:`device`'s current stream after the sender's work and
  // releases what the sender counted for this message.
  // torch.accel.ipc_collect: frees the memory this process shared that all
  // its receivers released, where the runtime keeps it for them.
  m.def("_ipc_collect", [] {
    checkNotInBadFork();
    py::gil_scoped_release no_gil;
    runtime().collectSharedMemory();
  });

  m.def("_reuse_shared_storage", [](const py::bytes& runtime_handle, uint64_t nbytes, int64_t device) {
    checkNotInBadFork();
    checkDeviceIndex(device);
    SharedStorageHandle handle;
    handle.handle = std::string(runtime_handle);
    handle.nbytes = nbytes;
    py::gil_scoped_release no_gil;
    runtime().reuseSharedStorage(handle, static_cast<c10::DeviceIndex>(device));
  });
}

} // namespace torch_accel
