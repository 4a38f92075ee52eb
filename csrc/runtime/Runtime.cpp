#include <csrc/runtime/Runtime.h>

#include <c10/core/AllocatorConfig.h>
#include <c10/util/Exception.h>

#include <pthread.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>

namespace torch_accel {

// Defined by the runtime implementations. The CUDA one exists only in builds
// against a CUDA-enabled torch; cudaDeviceCount() is cheap (no context).
const Runtime& hostRuntime();
#ifdef TORCH_ACCEL_WITH_CUDA
const Runtime& cudaRuntime();
c10::DeviceIndex cudaDeviceCount() noexcept;
#endif

namespace {

std::atomic<bool> initialized{false};

const Runtime& selectRuntime() {
  const char* env = std::getenv("TORCH_ACCEL_RUNTIME");
  const std::string choice = (env && *env) ? env : "auto";
  if (choice == "host") {
    return hostRuntime();
  }
  if (choice == "cuda") {
#ifdef TORCH_ACCEL_WITH_CUDA
    return cudaRuntime();
#else
    TORCH_CHECK(
        false,
        "TORCH_ACCEL_RUNTIME=cuda, but torch_accel was built without CUDA "
        "(the installed torch has no CUDA, or no CUDA toolkit was found at build time)");
#endif
  }
  TORCH_CHECK_VALUE(choice == "auto", "TORCH_ACCEL_RUNTIME must be one of auto, cuda, host; got '", choice, "'");
#ifdef TORCH_ACCEL_WITH_CUDA
  if (cudaDeviceCount() > 0) {
    return cudaRuntime();
  }
#endif
  return hostRuntime();
}

// The allocator settings of the environment, which c10 parses for every
// accelerator (PYTORCH_ALLOC_CONF, or the older PYTORCH_CUDA_ALLOC_CONF),
// are checked when accel initialises, so that a mistake in them is reported
// there, with the variable's name, rather than ignored.
void checkAllocatorSettings() {
  try {
    c10::CachingAllocator::AcceleratorAllocatorConfig::instance();
  } catch (const std::exception& e) {
    const char* name = "PYTORCH_ALLOC_CONF";
    for (const char* candidate : {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF"}) {
      if (std::getenv(candidate) != nullptr) {
        name = candidate;
        break;
      }
    }
    const char* value = std::getenv(name);
    const auto* error = dynamic_cast<const c10::Error*>(&e);
    TORCH_CHECK_VALUE(
        false,
        "accel: invalid allocator settings ",
        name,
        "='",
        value != nullptr ? value : "",
        "': ",
        error != nullptr ? error->msg() : e.what(),
        ". Expected comma-separated key:value pairs such as "
        "max_split_size_mb:256,garbage_collection_threshold:0.8,expandable_segments:False");
  }
}

} // namespace

const Runtime& runtime() {
  // A throwing initialiser leaves the static unset, so a bad configuration is
  // reported again on every call instead of being cached as a crash.
  static const Runtime& selected = selectRuntime();
  return selected;
}

namespace {

// pthread_atfork child handler: runs in the child, before fork() returns.
void markForkedChild() {
  detail::in_bad_fork.store(true, std::memory_order_relaxed);
}

} // namespace

namespace detail {

std::atomic<bool> in_bad_fork{false};

void throwInBadFork() {
  TORCH_CHECK(
      false,
      "Cannot re-initialize accel in forked subprocess. To use accel with multiprocessing, "
      "you must use the 'spawn' start method");
}

} // namespace detail

void initializeRuntime() {
  checkAllocatorSettings();
  runtime().init();
  // From now on a forked child inherits device state it cannot use.
  static const int registered = pthread_atfork(nullptr, nullptr, markForkedChild);
  TORCH_CHECK(registered == 0, "accel: cannot install its fork handler (pthread_atfork returned ", registered, ")");
  initialized.store(true, std::memory_order_release);
}

bool runtimeInitialized() noexcept {
  return initialized.load(std::memory_order_acquire);
}

void checkDeviceAvailable() {
  TORCH_CHECK(
      runtime().deviceCount() > 0,
      "No accel device is available (the ",
      runtime().name(),
      " runtime found none; see TORCH_ACCEL_RUNTIME and TORCH_ACCEL_HOST_DEVICES)");
}

void checkDeviceIndex(int64_t index) {
  checkDeviceAvailable();
  const int64_t count = runtime().deviceCount();
  TORCH_CHECK(
      index >= 0 && index < count,
      "Invalid accel device index ",
      index,
      ": there ",
      count == 1 ? "is 1 accel device" : "are " + std::to_string(count) + " accel devices",
      " (",
      runtime().name(),
      " runtime)");
}

TargetAllocationsAreAccel::TargetAllocationsAreAccel() : previous_(runtime().exchangeTargetAllocationsAreAccel(true)) {}

TargetAllocationsAreAccel::~TargetAllocationsAreAccel() {
  runtime().exchangeTargetAllocationsAreAccel(previous_);
}

c10::Device targetDevice(c10::DeviceIndex index) {
  // Fixed for the process, as the runtime is; every target view asks.
  static const auto type = runtime().targetType();
  // CPU is a single device and takes no index.
  return type == c10::DeviceType::CPU ? c10::Device(type) : c10::Device(type, index);
}

} // namespace torch_accel
