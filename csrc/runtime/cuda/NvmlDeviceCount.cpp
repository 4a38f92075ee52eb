#include <csrc/runtime/cuda/NvmlDeviceCount.h>

#include <dlfcn.h>

#include <cstdlib>
#include <set>
#include <sstream>
#include <string>

namespace torch_accel {

namespace {

// NVML's C API, loaded at run time: the library ships with the driver, not the
// toolkit, and a build machine without a GPU has no driver.
using NvmlReturn = int;
constexpr NvmlReturn kNvmlSuccess = 0;
using NvmlInit = NvmlReturn (*)();
using NvmlDeviceGetCount = NvmlReturn (*)(unsigned int*);
using NvmlShutdown = NvmlReturn (*)();

int physicalDeviceCount() noexcept {
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (nvml == nullptr) {
    return -1;
  }
  auto init = reinterpret_cast<NvmlInit>(dlsym(nvml, "nvmlInit_v2"));
  auto getCount = reinterpret_cast<NvmlDeviceGetCount>(dlsym(nvml, "nvmlDeviceGetCount_v2"));
  auto shutdown = reinterpret_cast<NvmlShutdown>(dlsym(nvml, "nvmlShutdown"));
  int result = -1;
  if (init != nullptr && getCount != nullptr && shutdown != nullptr && init() == kNvmlSuccess) {
    unsigned int count = 0;
    if (getCount(&count) == kNvmlSuccess) {
      result = static_cast<int>(count);
    }
    shutdown();
  }
  dlclose(nvml);
  return result;
}

// CUDA_VISIBLE_DEVICES as CUDA reads it: ordinals up to the first invalid or
// repeated one. Returns -1 for entries that are not plain ordinals.
int visibleAmong(const char* visible, int physical) {
  std::stringstream list(visible);
  std::string entry;
  std::set<long> seen;
  int count = 0;
  while (std::getline(list, entry, ',')) {
    const auto begin = entry.find_first_not_of(' ');
    if (begin == std::string::npos) {
      break;
    }
    char* end = nullptr;
    const long ordinal = std::strtol(entry.c_str() + begin, &end, 10);
    if (end == entry.c_str() + begin) {
      return -1; // a UUID or MIG name
    }
    if (ordinal < 0 || ordinal >= physical || !seen.insert(ordinal).second) {
      break;
    }
    ++count;
  }
  return count;
}

} // namespace

int nvmlVisibleDeviceCount() noexcept {
  // The machine's GPUs do not change while the process runs; which of them
  // CUDA will show may, until CUDA initialises, so that is read each time.
  static const int physical = physicalDeviceCount();
  if (physical < 0) {
    return -1;
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr) {
    return physical;
  }
  try {
    return visibleAmong(visible, physical);
  } catch (...) {
    return -1;
  }
}

} // namespace torch_accel
