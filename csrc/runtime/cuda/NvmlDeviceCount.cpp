#include <csrc/runtime/cuda/CudaVisibleDevices.h>
#include <csrc/runtime/cuda/NvmlDeviceCount.h>

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace torch_accel {

namespace {

// NVML's C API, loaded at run time: the library ships with the driver, not the
// toolkit, and a build machine without a GPU has no driver.
using NvmlReturn = int;
using NvmlDevice = void*;
constexpr NvmlReturn kNvmlSuccess = 0;
// NVML_DEVICE_UUID_V2_BUFFER_SIZE: room for any UUID and its terminating zero.
constexpr unsigned int kUuidBufferSize = 96;

struct NvmlLibrary {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*getCount)(unsigned int*) = nullptr;
  NvmlReturn (*getHandleByIndex)(unsigned int, NvmlDevice*) = nullptr;
  NvmlReturn (*getUuid)(NvmlDevice, char*, unsigned int) = nullptr;

  // The driver's libnvidia-ml, or nullptr where it is missing or incomplete.
  // Loaded once and kept, as torch.cuda keeps its handle.
  static const NvmlLibrary* get() noexcept {
    static const std::optional<NvmlLibrary> library = load();
    return library.has_value() ? &*library : nullptr;
  }

private:
  template <typename Function> static bool resolve(void* handle, const char* name, Function& function) {
    function = reinterpret_cast<Function>(dlsym(handle, name));
    return function != nullptr;
  }

  static std::optional<NvmlLibrary> load() noexcept {
    void* handle = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (handle == nullptr) {
      return std::nullopt;
    }
    NvmlLibrary library;
    if (!resolve(handle, "nvmlInit_v2", library.init) || !resolve(handle, "nvmlShutdown", library.shutdown) ||
        !resolve(handle, "nvmlDeviceGetCount_v2", library.getCount) ||
        !resolve(handle, "nvmlDeviceGetHandleByIndex_v2", library.getHandleByIndex) ||
        !resolve(handle, "nvmlDeviceGetUUID", library.getUuid)) {
      dlclose(handle);
      return std::nullopt;
    }
    return library;
  }
};

// One NVML session (nvmlInit ... nvmlShutdown) that runs `query`; nullopt when
// NVML is missing, fails to initialise or `query` fails.
template <typename Query> auto withNvml(Query query) -> decltype(query(std::declval<const NvmlLibrary&>())) {
  const NvmlLibrary* nvml = NvmlLibrary::get();
  if (nvml == nullptr || nvml->init() != kNvmlSuccess) {
    return std::nullopt;
  }
  auto result = query(*nvml);
  nvml->shutdown();
  return result;
}

std::optional<int64_t> physicalDeviceCount(const NvmlLibrary& nvml) {
  unsigned int count = 0;
  if (nvml.getCount(&count) != kNvmlSuccess) {
    return std::nullopt;
  }
  return static_cast<int64_t>(count);
}

std::optional<std::vector<std::string>> physicalDeviceUuids(const NvmlLibrary& nvml) {
  const std::optional<int64_t> count = physicalDeviceCount(nvml);
  if (!count.has_value()) {
    return std::nullopt;
  }
  std::vector<std::string> uuids;
  for (int64_t index = 0; index < *count; ++index) {
    NvmlDevice device = nullptr;
    char uuid[kUuidBufferSize] = {};
    if (nvml.getHandleByIndex(static_cast<unsigned int>(index), &device) != kNvmlSuccess ||
        nvml.getUuid(device, uuid, kUuidBufferSize) != kNvmlSuccess) {
      return std::nullopt;
    }
    uuid[kUuidBufferSize - 1] = '\0';
    uuids.emplace_back(uuid);
  }
  return uuids;
}

// The machine's GPUs do not change while the process runs: NVML is asked once
// for their number, and once for their UUIDs if CUDA_VISIBLE_DEVICES ever
// names UUIDs (querying handles may wake every GPU up).
std::optional<int64_t> cachedPhysicalDeviceCount() {
  static const std::optional<int64_t> count = withNvml(physicalDeviceCount);
  return count;
}

const std::optional<std::vector<std::string>>& cachedPhysicalDeviceUuids() {
  static const std::optional<std::vector<std::string>> uuids = withNvml(physicalDeviceUuids);
  return uuids;
}

int64_t visibleDeviceCount(const CudaVisibleDevices& visible) {
  if (visible.empty()) {
    return 0; // decided by the list alone, as in torch.cuda
  }
  switch (visible.kind) {
  case CudaVisibleDevices::Kind::Ordinals: {
    const std::optional<int64_t> physical = cachedPhysicalDeviceCount();
    if (!physical.has_value()) {
      return -1;
    }
    return cudaVisibleOrdinalCount(visible.ordinals, *physical);
  }
  case CudaVisibleDevices::Kind::GpuUuids: {
    const auto& uuids = cachedPhysicalDeviceUuids();
    if (!uuids.has_value()) {
      return -1;
    }
    return static_cast<int64_t>(cudaUuidsToOrdinals(visible.uuids, *uuids).size());
  }
  case CudaVisibleDevices::Kind::MigUuids:
    // MIG instances are not GPUs NVML lists by index; torch.cuda leaves
    // them to CUDA too.
    return -1;
  }
  return -1;
}

} // namespace

int nvmlVisibleDeviceCount() noexcept {
  try {
    // Which GPUs CUDA will show may change until CUDA initialises: read it each time.
    return static_cast<int>(visibleDeviceCount(parseCudaVisibleDevices(std::getenv("CUDA_VISIBLE_DEVICES"))));
  } catch (...) {
    return -1;
  }
}

} // namespace torch_accel
