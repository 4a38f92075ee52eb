// Unit tests for accelrt, with a tiny self-written harness.
//
// Each test is a function; every failed check prints one line "file:line: message"; at the end the
// binary prints "N passed, M failed" (counting tests) and exits non-zero if M > 0.
//
// The device count is fixed at first use, so main() first runs the tests that need a fresh runtime in
// forked children (before the parent touches any device), then calls accelrtSetDeviceCount(3).
#include "accelrt/accelrt.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

// Under AddressSanitizer, let impossible allocations return NULL (the tests expect
// accelrtErrorMemoryAllocation) even when the binary is run without ASAN_OPTIONS.
extern "C" const char* __asan_default_options() {
  return "allocator_may_return_null=1";
}

// Defined in test/c_api.c (compiled as C, where enum arguments may hold any int).
extern "C" {
const char* accelrt_test_error_string(int code);
const char* accelrt_test_error_name(int code);
accelrtError_t accelrt_test_memcpy(void* dst, const void* src, size_t count, int kind);
int accelrt_test_c_types(void);
}

namespace {

// ---- harness ------------------------------------------------------------------------------------

std::atomic<int> g_check_failures{0};

void report_failure(const char* file, int line, const std::string& message) {
  g_check_failures.fetch_add(1);
  std::printf("%s:%d: FAILED: %s\n", file, line, message.c_str());
  std::fflush(stdout);
}

#define EXPECT(cond)                                                                                                   \
  do {                                                                                                                 \
    if (!(cond))                                                                                                       \
      report_failure(__FILE__, __LINE__, "EXPECT(" #cond ")");                                                         \
  } while (0)

#define EXPECT_ERR(expr, expected)                                                                                     \
  do {                                                                                                                 \
    const accelrtError_t actual_ = (expr);                                                                             \
    const accelrtError_t expected_ = (expected);                                                                       \
    if (actual_ != expected_) {                                                                                        \
      report_failure(                                                                                                  \
          __FILE__,                                                                                                    \
          __LINE__,                                                                                                    \
          std::string(#expr " returned ") + accelrtGetErrorName(actual_) + ", expected " +                             \
              accelrtGetErrorName(expected_));                                                                         \
    }                                                                                                                  \
  } while (0)

#define EXPECT_OK(expr) EXPECT_ERR(expr, accelrtSuccess)

struct TestCase {
  const char* name;
  void (*fn)();
};

int g_passed = 0;
int g_failed = 0;

void run_test(const TestCase& test) {
  const int before = g_check_failures.load();
  test.fn();
  if (g_check_failures.load() == before) {
    ++g_passed;
  } else {
    ++g_failed;
    std::printf("test %s failed\n", test.name);
  }
}

// Runs body in a forked child; returns the child's exit status (body's return value), or -1.
int run_in_child(const std::function<int()>& body) {
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    const int code = body();
    std::fflush(stdout);
    _exit(code);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid)
    return -1;
  if (!WIFEXITED(status))
    return -1;
  return WEXITSTATUS(status);
}

// Child body helper: 0 if no check failed inside the child, 1 otherwise.
int child_result(int failures_before) {
  return g_check_failures.load() == failures_before ? 0 : 1;
}

std::size_t physical_memory() {
  return static_cast<std::size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<std::size_t>(sysconf(_SC_PAGE_SIZE));
}

bool aligned64(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 64 == 0;
}

void busy_wait(std::chrono::microseconds duration) {
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < duration) {
  }
}

// ---- tests run in forked children, before the parent fixes the device count ---------------------

void test_env_device_count() {
  struct Case {
    const char* value; // nullptr: unset
    int expected;
  };
  const Case cases[] = {
      {nullptr, 2},
      {"", 2},
      {"0", 0},
      {"1", 1},
      {"5", 5},
      {"64", 64},
      {"007", 7},
      {"65", 2},
      {"abc", 2},
      {"-1", 2},
      {"3x", 2},
      {" 4", 2},
      {"4 ", 2},
      {"+4", 2},
      {"1.5", 2},
      {"99999999999999999999", 2},
  };
  for (const Case& c : cases) {
    const int code = run_in_child([&c]() {
      if (c.value == nullptr) {
        unsetenv("ACCELRT_DEVICE_COUNT");
      } else {
        setenv("ACCELRT_DEVICE_COUNT", c.value, 1);
      }
      int count = -1;
      if (accelrtGetDeviceCount(&count) != accelrtSuccess)
        return 200;
      // The count is now fixed.
      if (accelrtSetDeviceCount(1) != accelrtErrorAlreadyInitialized)
        return 201;
      return count;
    });
    if (code != c.expected) {
      report_failure(
          __FILE__,
          __LINE__,
          std::string("ACCELRT_DEVICE_COUNT=") + (c.value ? c.value : "(unset)") + " gave " + std::to_string(code) +
              ", expected " + std::to_string(c.expected));
    }
  }
  // accelrtSetDeviceCount before first use overrides the environment.
  EXPECT(run_in_child([]() {
           setenv("ACCELRT_DEVICE_COUNT", "7", 1);
           if (accelrtSetDeviceCount(4) != accelrtSuccess)
             return 100;
           int count = -1;
           if (accelrtGetDeviceCount(&count) != accelrtSuccess)
             return 101;
           return count;
         }) == 4);
  // Any device-touching call fixes the count, e.g. accelrtGetDevice or accelrtMalloc.
  EXPECT(run_in_child([]() {
           unsetenv("ACCELRT_DEVICE_COUNT");
           int device = -1;
           if (accelrtGetDevice(&device) != accelrtSuccess || device != 0)
             return 100;
           return accelrtSetDeviceCount(3) == accelrtErrorAlreadyInitialized ? 0 : 101;
         }) == 0);
  EXPECT(run_in_child([]() {
           unsetenv("ACCELRT_DEVICE_COUNT");
           void* p = nullptr;
           if (accelrtMalloc(&p, 16) != accelrtSuccess)
             return 100;
           const bool fixed = accelrtSetDeviceCount(3) == accelrtErrorAlreadyInitialized;
           accelrtFree(p);
           return fixed ? 0 : 101;
         }) == 0);
  // Calls that do not touch devices leave the count open.
  EXPECT(run_in_child([]() {
           const int before = g_check_failures.load();
           void* host = nullptr;
           EXPECT_OK(accelrtMallocHost(&host, 32));
           accelrtPointerAttributes attr;
           EXPECT_OK(accelrtPointerGetAttributes(&attr, host));
           char buf[32];
           EXPECT_OK(accelrtMemcpy(buf, host, sizeof(buf), accelrtMemcpyHostToHost));
           EXPECT_OK(accelrtFreeHost(host));
           int least = 1, greatest = 1;
           EXPECT_OK(accelrtDeviceGetStreamPriorityRange(&least, &greatest));
           EXPECT(accelrtGetErrorString(accelrtSuccess) != nullptr);
           EXPECT_OK(accelrtSetDeviceCount(5));
           return child_result(before);
         }) == 0);
}

void test_set_device_count_validation() {
  EXPECT(run_in_child([]() {
           const int before = g_check_failures.load();
           EXPECT_ERR(accelrtSetDeviceCount(-1), accelrtErrorInvalidValue);
           EXPECT_ERR(accelrtSetDeviceCount(65), accelrtErrorInvalidValue);
           EXPECT_OK(accelrtSetDeviceCount(64));
           EXPECT_ERR(accelrtSetDeviceCount(64), accelrtErrorAlreadyInitialized);
           EXPECT_ERR(accelrtSetDeviceCount(65), accelrtErrorInvalidValue);
           int count = -1;
           EXPECT_OK(accelrtGetDeviceCount(&count));
           EXPECT(count == 64);
           EXPECT_OK(accelrtSetDevice(63));
           EXPECT_ERR(accelrtSetDevice(64), accelrtErrorInvalidDevice);
           void* p = nullptr;
           EXPECT_OK(accelrtMalloc(&p, 8));
           accelrtPointerAttributes attr;
           EXPECT_OK(accelrtPointerGetAttributes(&attr, p));
           EXPECT(attr.device == 63);
           EXPECT_OK(accelrtFree(p));
           return child_result(before);
         }) == 0);
}

void test_zero_devices() {
  EXPECT(run_in_child([]() {
           const int before = g_check_failures.load();
           EXPECT_OK(accelrtSetDeviceCount(0));
           int count = -1;
           EXPECT_OK(accelrtGetDeviceCount(&count));
           EXPECT(count == 0);
           int device = -1;
           EXPECT_ERR(accelrtGetDevice(&device), accelrtErrorNoDevice);
           EXPECT_ERR(accelrtSetDevice(0), accelrtErrorNoDevice);
           EXPECT_ERR(accelrtDeviceSynchronize(), accelrtErrorNoDevice);
           accelrtDeviceProp prop;
           EXPECT_ERR(accelrtGetDeviceProperties(&prop, 0), accelrtErrorNoDevice);
           EXPECT_ERR(accelrtDeviceSetMemoryLimit(0, 100), accelrtErrorNoDevice);
           size_t free_bytes = 0, total_bytes = 0;
           EXPECT_ERR(accelrtMemGetInfo(&free_bytes, &total_bytes), accelrtErrorNoDevice);
           void* p = reinterpret_cast<void*>(0x1);
           EXPECT_ERR(accelrtMalloc(&p, 16), accelrtErrorNoDevice);
           EXPECT(p == nullptr);
           accelrtMemoryStats stats;
           EXPECT_ERR(accelrtDeviceGetMemoryStats(0, &stats), accelrtErrorNoDevice);
           EXPECT_ERR(accelrtDeviceResetPeakMemoryStats(0), accelrtErrorNoDevice);
           accelrtStream_t stream = nullptr;
           EXPECT_ERR(accelrtStreamCreate(&stream), accelrtErrorNoDevice);
           EXPECT_ERR(accelrtStreamCreateWithPriority(&stream, 0, -1), accelrtErrorNoDevice);
           EXPECT_ERR(accelrtStreamGetDevice(nullptr, &device), accelrtErrorNoDevice);
           EXPECT_ERR(accelrtStreamQuery(nullptr), accelrtErrorNoDevice);
           accelrtEvent_t event = nullptr;
           EXPECT_ERR(accelrtEventCreate(&event), accelrtErrorNoDevice);
           // Host memory still works.
           void* host = nullptr;
           EXPECT_OK(accelrtMallocHost(&host, 64));
           EXPECT(host != nullptr);
           EXPECT_OK(accelrtFreeHost(host));
           return child_result(before);
         }) == 0);
}

// ---- tests in the main process (3 devices) ----------------------------------------------------

void test_set_device_count() {
  EXPECT_OK(accelrtSetDeviceCount(3));
  EXPECT_ERR(accelrtSetDeviceCount(3), accelrtErrorAlreadyInitialized);
  EXPECT_ERR(accelrtSetDeviceCount(2), accelrtErrorAlreadyInitialized);
  EXPECT_ERR(accelrtSetDeviceCount(-1), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtSetDeviceCount(65), accelrtErrorInvalidValue);
  int count = -1;
  EXPECT_OK(accelrtGetDeviceCount(&count));
  EXPECT(count == 3);
  EXPECT_ERR(accelrtGetDeviceCount(nullptr), accelrtErrorInvalidValue);
}

void test_error_strings() {
  struct Case {
    accelrtError_t code;
    const char* name;
  };
  const Case cases[] = {
      {accelrtSuccess, "accelrtSuccess"},
      {accelrtErrorInvalidValue, "accelrtErrorInvalidValue"},
      {accelrtErrorMemoryAllocation, "accelrtErrorMemoryAllocation"},
      {accelrtErrorInvalidDevice, "accelrtErrorInvalidDevice"},
      {accelrtErrorNoDevice, "accelrtErrorNoDevice"},
      {accelrtErrorInvalidResourceHandle, "accelrtErrorInvalidResourceHandle"},
      {accelrtErrorNotReady, "accelrtErrorNotReady"},
      {accelrtErrorAlreadyInitialized, "accelrtErrorAlreadyInitialized"},
      {accelrtErrorInjectedFault, "accelrtErrorInjectedFault"},
  };
  for (const Case& c : cases) {
    EXPECT(std::strcmp(accelrtGetErrorName(c.code), c.name) == 0);
    const char* description = accelrtGetErrorString(c.code);
    EXPECT(description != nullptr && description[0] != '\0');
    EXPECT(std::strcmp(description, "unrecognized error code") != 0);
  }
  EXPECT(std::strcmp(accelrtGetErrorString(accelrtErrorInvalidDevice), "invalid device ordinal") == 0);
  EXPECT(std::strcmp(accelrtGetErrorString(accelrtSuccess), "no error") == 0);
  // Unknown codes (passed from C, where any int is a valid enum value).
  for (int unknown : {9, 1234, -1}) {
    const char* description = accelrt_test_error_string(unknown);
    EXPECT(description != nullptr);
    EXPECT(description != nullptr && std::strcmp(description, "unrecognized error code") == 0);
    const char* name = accelrt_test_error_name(unknown);
    EXPECT(name != nullptr && std::strcmp(name, "unrecognized error code") == 0);
  }
  EXPECT(std::strcmp(accelrt_test_error_name(3), "accelrtErrorInvalidDevice") == 0);
  EXPECT(accelrt_test_c_types() == 1);
}

void test_current_device() {
  int device = -1;
  EXPECT_OK(accelrtGetDevice(&device));
  EXPECT(device == 0);
  EXPECT_ERR(accelrtGetDevice(nullptr), accelrtErrorInvalidValue);
  EXPECT_OK(accelrtSetDevice(2));
  EXPECT_OK(accelrtGetDevice(&device));
  EXPECT(device == 2);

  int thread_initial = -1;
  int thread_after = -1;
  accelrtError_t thread_get = accelrtErrorNotReady;
  std::thread worker([&]() {
    thread_get = accelrtGetDevice(&thread_initial);
    if (accelrtSetDevice(1) == accelrtSuccess)
      accelrtGetDevice(&thread_after);
  });
  worker.join();
  EXPECT_OK(thread_get);
  EXPECT(thread_initial == 0);
  EXPECT(thread_after == 1);
  EXPECT_OK(accelrtGetDevice(&device));
  EXPECT(device == 2); // the worker's SetDevice did not affect this thread

  EXPECT_ERR(accelrtSetDevice(3), accelrtErrorInvalidDevice);
  EXPECT_ERR(accelrtSetDevice(-1), accelrtErrorInvalidDevice);
  EXPECT_ERR(accelrtSetDevice(1000), accelrtErrorInvalidDevice);
  EXPECT_OK(accelrtGetDevice(&device));
  EXPECT(device == 2); // unchanged by failed calls
  EXPECT_OK(accelrtSetDevice(0));
}

void test_device_synchronize() {
  for (int d = 0; d < 3; ++d) {
    EXPECT_OK(accelrtSetDevice(d));
    EXPECT_OK(accelrtDeviceSynchronize());
  }
  EXPECT_OK(accelrtSetDevice(0));
}

void test_device_properties() {
  const int expected_sms = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int d = 0; d < 3; ++d) {
    accelrtDeviceProp prop;
    std::memset(&prop, 0x7F, sizeof(prop));
    EXPECT_OK(accelrtGetDeviceProperties(&prop, d));
    EXPECT(std::string(prop.name) == "accelrt host device " + std::to_string(d));
    EXPECT(prop.totalGlobalMem == physical_memory());
    EXPECT(prop.major == 1);
    EXPECT(prop.minor == 0);
    EXPECT(prop.multiProcessorCount == expected_sms);
    EXPECT(prop.warpSize == 1);
    EXPECT(prop.maxThreadsPerBlock == 1);
  }
  accelrtDeviceProp prop;
  EXPECT_ERR(accelrtGetDeviceProperties(nullptr, 0), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtGetDeviceProperties(&prop, 3), accelrtErrorInvalidDevice);
  EXPECT_ERR(accelrtGetDeviceProperties(&prop, -1), accelrtErrorInvalidDevice);
  // totalGlobalMem follows the memory limit.
  EXPECT_OK(accelrtDeviceSetMemoryLimit(1, 12345));
  EXPECT_OK(accelrtGetDeviceProperties(&prop, 1));
  EXPECT(prop.totalGlobalMem == 12345);
  EXPECT_OK(accelrtDeviceSetMemoryLimit(1, physical_memory()));
}

void test_malloc_free() {
  EXPECT_OK(accelrtSetDevice(1));
  void* p = nullptr;
  EXPECT_OK(accelrtMalloc(&p, 100));
  EXPECT(p != nullptr);
  EXPECT(aligned64(p));
  std::memset(p, 0x5A, 100); // device memory is host memory
  accelrtPointerAttributes attr;
  EXPECT_OK(accelrtPointerGetAttributes(&attr, p));
  EXPECT(attr.type == accelrtMemoryTypeDevice);
  EXPECT(attr.device == 1);

  // Several allocations are all aligned and distinct.
  void* q[5] = {};
  for (int i = 0; i < 5; ++i) {
    EXPECT_OK(accelrtMalloc(&q[i], static_cast<size_t>(1 + 37 * i)));
    EXPECT(aligned64(q[i]));
  }
  for (int i = 0; i < 5; ++i)
    EXPECT_OK(accelrtFree(q[i]));

  // Size 0 gives NULL and success.
  void* z = reinterpret_cast<void*>(0x1);
  EXPECT_OK(accelrtMalloc(&z, 0));
  EXPECT(z == nullptr);
  EXPECT_ERR(accelrtMalloc(nullptr, 8), accelrtErrorInvalidValue);

  // Errors on free never crash.
  int on_stack = 0;
  EXPECT_OK(accelrtFree(nullptr));
  EXPECT_ERR(accelrtFree(&on_stack), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtFree(static_cast<char*>(p) + 1), accelrtErrorInvalidValue); // interior
  void* host = nullptr;
  EXPECT_OK(accelrtMallocHost(&host, 64));
  EXPECT_ERR(accelrtFree(host), accelrtErrorInvalidValue); // pinned host memory
  EXPECT_OK(accelrtFreeHost(host));

  // Freeing while another device is current is fine.
  EXPECT_OK(accelrtSetDevice(0));
  EXPECT_OK(accelrtFree(p));
  EXPECT_ERR(accelrtFree(p), accelrtErrorInvalidValue); // double free
  accelrtMemoryStats stats;
  EXPECT_OK(accelrtDeviceGetMemoryStats(1, &stats));
  EXPECT(stats.allocatedBytes == 0);
  EXPECT(stats.allocationCount == 0);
}

// Freed blocks may keep their host memory for the next allocations (see memory.cpp); a freed and
// reallocated block is a new allocation in every respect.
void test_malloc_reuses_freed_memory() {
  EXPECT_OK(accelrtSetDevice(0));
  accelrtMemoryStats before;
  EXPECT_OK(accelrtDeviceGetMemoryStats(0, &before));
  for (size_t size : {size_t{1}, size_t{100}, size_t{4096}, size_t{16384}, (size_t{1} << 20) + 1}) {
    void* p = nullptr;
    EXPECT_OK(accelrtMalloc(&p, size));
    std::memset(p, 0x5A, size);
    EXPECT_OK(accelrtFree(p));
    accelrtPointerAttributes attr;
    EXPECT_OK(accelrtPointerGetAttributes(&attr, p));
    EXPECT(attr.type == accelrtMemoryTypeUnregistered);
    EXPECT_ERR(accelrtFree(p), accelrtErrorInvalidValue);
    // The same size class again, and a size just above it: both whole, aligned and registered.
    void* q = nullptr;
    void* r = nullptr;
    EXPECT_OK(accelrtMalloc(&q, size));
    EXPECT_OK(accelrtMalloc(&r, size + 64));
    EXPECT(aligned64(q) && aligned64(r) && q != r);
    std::memset(q, 0x11, size);
    std::memset(r, 0x22, size + 64);
    EXPECT(static_cast<unsigned char*>(q)[size - 1] == 0x11);
    EXPECT_OK(accelrtPointerGetAttributes(&attr, q));
    EXPECT(attr.type == accelrtMemoryTypeDevice && attr.basePointer == q && attr.size == size);
    EXPECT_OK(accelrtPointerGetAttributes(&attr, r));
    EXPECT(attr.type == accelrtMemoryTypeDevice && attr.basePointer == r && attr.size == size + 64);
    accelrtMemoryStats stats;
    EXPECT_OK(accelrtDeviceGetMemoryStats(0, &stats));
    EXPECT(stats.allocatedBytes == before.allocatedBytes + 2 * size + 64);
    EXPECT(stats.allocationCount == before.allocationCount + 2);
    EXPECT_OK(accelrtFree(q));
    EXPECT_OK(accelrtFree(r));
  }
  // A cached block does not count against the limit, nor does it get around it.
  EXPECT_OK(accelrtDeviceSetMemoryLimit(0, before.allocatedBytes + 100));
  void* p = nullptr;
  EXPECT_OK(accelrtMalloc(&p, 100));
  EXPECT_OK(accelrtFree(p));
  EXPECT_ERR(accelrtMalloc(&p, 101), accelrtErrorMemoryAllocation);
  EXPECT(p == nullptr);
  EXPECT_OK(accelrtMalloc(&p, 100));
  void* over = nullptr;
  EXPECT_ERR(accelrtMalloc(&over, 1), accelrtErrorMemoryAllocation);
  EXPECT_OK(accelrtDeviceSetMemoryLimit(0, physical_memory()));
  accelrtMemoryStats after;
  EXPECT_OK(accelrtDeviceGetMemoryStats(0, &after));
  EXPECT(after.allocatedBytes == before.allocatedBytes + 100);
  EXPECT_OK(accelrtFree(p));
  // Trimming hands the kept memory back (nothing is kept under AddressSanitizer); a second trim
  // finds nothing, and allocations work as before.
  size_t released = 1;
  EXPECT_OK(accelrtMemTrimCache(&released));
  size_t again = 1;
  EXPECT_OK(accelrtMemTrimCache(&again));
  EXPECT(again == 0);
  EXPECT_OK(accelrtMemTrimCache(nullptr));
  EXPECT_OK(accelrtMalloc(&p, 100));
  EXPECT(aligned64(p));
  EXPECT_OK(accelrtFree(p));
}

void test_memory_limit_and_oom() {
  const size_t kMiB = size_t{1} << 20;
  EXPECT_OK(accelrtSetDevice(2));
  EXPECT_OK(accelrtDeviceSetMemoryLimit(2, kMiB));
  size_t free_bytes = 0, total_bytes = 0;
  EXPECT_OK(accelrtMemGetInfo(&free_bytes, &total_bytes));
  EXPECT(total_bytes == kMiB);
  EXPECT(free_bytes == kMiB);

  void* a = nullptr;
  EXPECT_OK(accelrtMalloc(&a, kMiB / 2));
  EXPECT_OK(accelrtMemGetInfo(&free_bytes, &total_bytes));
  EXPECT(free_bytes == kMiB / 2);
  void* b = reinterpret_cast<void*>(0x1);
  EXPECT_ERR(accelrtMalloc(&b, 3 * kMiB / 4), accelrtErrorMemoryAllocation);
  EXPECT(b == nullptr);
  // Exactly filling the limit works.
  void* c = nullptr;
  EXPECT_OK(accelrtMalloc(&c, kMiB / 2));
  EXPECT_OK(accelrtMemGetInfo(&free_bytes, &total_bytes));
  EXPECT(free_bytes == 0);
  void* d = reinterpret_cast<void*>(0x1);
  EXPECT_ERR(accelrtMalloc(&d, 1), accelrtErrorMemoryAllocation);
  EXPECT(d == nullptr);
  EXPECT_OK(accelrtFree(c));

  // Other devices are unaffected by this device's limit.
  EXPECT_OK(accelrtSetDevice(0));
  void* other = nullptr;
  EXPECT_OK(accelrtMalloc(&other, 2 * kMiB));
  EXPECT_OK(accelrtFree(other));
  EXPECT_OK(accelrtSetDevice(2));

  // Recovery after free.
  EXPECT_OK(accelrtFree(a));
  EXPECT_OK(accelrtMalloc(&b, 3 * kMiB / 4));
  EXPECT(b != nullptr);

  // A limit below current usage makes further allocations fail, and free reads 0.
  EXPECT_OK(accelrtDeviceSetMemoryLimit(2, 100));
  EXPECT_OK(accelrtMemGetInfo(&free_bytes, &total_bytes));
  EXPECT(free_bytes == 0);
  EXPECT(total_bytes == 100);
  EXPECT_ERR(accelrtMalloc(&d, 1), accelrtErrorMemoryAllocation);
  EXPECT_OK(accelrtFree(b));
  EXPECT_OK(accelrtMalloc(&d, 100));
  EXPECT_OK(accelrtFree(d));

  // An allocation the host cannot satisfy fails cleanly and leaves the statistics unchanged.
  EXPECT_OK(accelrtDeviceSetMemoryLimit(2, SIZE_MAX));
  void* huge = reinterpret_cast<void*>(0x1);
  EXPECT_ERR(accelrtMalloc(&huge, SIZE_MAX / 2), accelrtErrorMemoryAllocation);
  EXPECT(huge == nullptr);
  accelrtMemoryStats stats;
  EXPECT_OK(accelrtDeviceGetMemoryStats(2, &stats));
  EXPECT(stats.allocatedBytes == 0);
  EXPECT(stats.allocationCount == 0);
  EXPECT_OK(accelrtMemGetInfo(&free_bytes, &total_bytes));
  EXPECT(free_bytes == SIZE_MAX);

  // Default limit (physical memory): SIZE_MAX is over the limit.
  EXPECT_OK(accelrtDeviceSetMemoryLimit(2, physical_memory()));
  EXPECT_ERR(accelrtMalloc(&huge, SIZE_MAX), accelrtErrorMemoryAllocation);

  EXPECT_ERR(accelrtMemGetInfo(nullptr, &total_bytes), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtMemGetInfo(&free_bytes, nullptr), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtDeviceSetMemoryLimit(3, kMiB), accelrtErrorInvalidDevice);
  EXPECT_ERR(accelrtDeviceSetMemoryLimit(-1, kMiB), accelrtErrorInvalidDevice);
  EXPECT_OK(accelrtSetDevice(0));
}

void test_memory_stats() {
  EXPECT_OK(accelrtSetDevice(0));
  EXPECT_OK(accelrtDeviceResetPeakMemoryStats(0));
  accelrtMemoryStats stats;
  EXPECT_OK(accelrtDeviceGetMemoryStats(0, &stats));
  EXPECT(stats.allocatedBytes == 0);
  EXPECT(stats.peakAllocatedBytes == 0);
  EXPECT(stats.allocationCount == 0);

  void* a = nullptr;
  void* b = nullptr;
  EXPECT_OK(accelrtMalloc(&a, 1000));
  EXPECT_OK(accelrtMalloc(&b, 3000));
  EXPECT_OK(accelrtDeviceGetMemoryStats(0, &stats));
  EXPECT(stats.allocatedBytes == 4000);
  EXPECT(stats.peakAllocatedBytes == 4000);
  EXPECT(stats.allocationCount == 2);

  // Other devices see nothing.
  accelrtMemoryStats other;
  EXPECT_OK(accelrtDeviceGetMemoryStats(1, &other));
  EXPECT(other.allocatedBytes == 0);
  EXPECT(other.allocationCount == 0);

  EXPECT_OK(accelrtFree(b));
  EXPECT_OK(accelrtDeviceGetMemoryStats(0, &stats));
  EXPECT(stats.allocatedBytes == 1000);
  EXPECT(stats.peakAllocatedBytes == 4000);
  EXPECT(stats.allocationCount == 1);

  EXPECT_OK(accelrtDeviceResetPeakMemoryStats(0));
  EXPECT_OK(accelrtDeviceGetMemoryStats(0, &stats));
  EXPECT(stats.peakAllocatedBytes == 1000);

  // Pinned host memory is not counted.
  void* host = nullptr;
  EXPECT_OK(accelrtMallocHost(&host, 5000));
  EXPECT_OK(accelrtDeviceGetMemoryStats(0, &stats));
  EXPECT(stats.allocatedBytes == 1000);
  EXPECT_OK(accelrtFreeHost(host));

  EXPECT_OK(accelrtFree(a));
  EXPECT_OK(accelrtDeviceGetMemoryStats(0, &stats));
  EXPECT(stats.allocatedBytes == 0);
  EXPECT(stats.peakAllocatedBytes == 1000);
  EXPECT(stats.allocationCount == 0);
  EXPECT_OK(accelrtDeviceResetPeakMemoryStats(0));
  EXPECT_OK(accelrtDeviceGetMemoryStats(0, &stats));
  EXPECT(stats.peakAllocatedBytes == 0);

  EXPECT_ERR(accelrtDeviceGetMemoryStats(0, nullptr), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtDeviceGetMemoryStats(3, &stats), accelrtErrorInvalidDevice);
  EXPECT_ERR(accelrtDeviceGetMemoryStats(-1, &stats), accelrtErrorInvalidDevice);
  EXPECT_ERR(accelrtDeviceResetPeakMemoryStats(3), accelrtErrorInvalidDevice);
}

void test_pointer_attributes() {
  EXPECT_OK(accelrtSetDevice(2));
  char* p = nullptr;
  EXPECT_OK(accelrtMalloc(reinterpret_cast<void**>(&p), 256));
  accelrtPointerAttributes attr;
  for (size_t offset : {size_t{0}, size_t{1}, size_t{128}, size_t{255}}) {
    std::memset(&attr, 0, sizeof(attr));
    EXPECT_OK(accelrtPointerGetAttributes(&attr, p + offset));
    EXPECT(attr.type == accelrtMemoryTypeDevice);
    EXPECT(attr.device == 2);
    EXPECT(attr.basePointer == p);
    EXPECT(attr.size == 256);
  }
  // One past the end is not inside the allocation.
  EXPECT_OK(accelrtPointerGetAttributes(&attr, p + 256));
  EXPECT(attr.basePointer != p);

  char* h = nullptr;
  EXPECT_OK(accelrtMallocHost(reinterpret_cast<void**>(&h), 100));
  EXPECT_OK(accelrtPointerGetAttributes(&attr, h + 50));
  EXPECT(attr.type == accelrtMemoryTypeHost);
  EXPECT(attr.device == -1);
  EXPECT(attr.basePointer == h);
  EXPECT(attr.size == 100);

  int on_stack = 0;
  std::memset(&attr, 0x55, sizeof(attr));
  EXPECT_OK(accelrtPointerGetAttributes(&attr, &on_stack));
  EXPECT(attr.type == accelrtMemoryTypeUnregistered);
  EXPECT(attr.device == -1);
  EXPECT(attr.basePointer == nullptr);
  EXPECT(attr.size == 0);
  EXPECT_OK(accelrtPointerGetAttributes(&attr, nullptr));
  EXPECT(attr.type == accelrtMemoryTypeUnregistered);
  EXPECT(attr.device == -1);
  EXPECT_ERR(accelrtPointerGetAttributes(nullptr, p), accelrtErrorInvalidValue);

  EXPECT_OK(accelrtFree(p));
  EXPECT_OK(accelrtFreeHost(h));
  // Freed memory is untracked (the allocator may not have reused it yet).
  accelrtPointerAttributes after;
  EXPECT_OK(accelrtPointerGetAttributes(&after, p));
  EXPECT(after.type == accelrtMemoryTypeUnregistered || after.basePointer != p);
  EXPECT_OK(accelrtSetDevice(0));
}

void test_host_alloc() {
  void* h = nullptr;
  EXPECT_OK(accelrtMallocHost(&h, 4096));
  EXPECT(h != nullptr);
  EXPECT(aligned64(h));
  std::memset(h, 0x11, 4096);
  EXPECT_OK(accelrtFreeHost(h));
  EXPECT_ERR(accelrtFreeHost(h), accelrtErrorInvalidValue); // double free

  void* z = reinterpret_cast<void*>(0x1);
  EXPECT_OK(accelrtMallocHost(&z, 0));
  EXPECT(z == nullptr);
  EXPECT_ERR(accelrtMallocHost(nullptr, 8), accelrtErrorInvalidValue);
  EXPECT_OK(accelrtFreeHost(nullptr));

  int on_stack = 0;
  EXPECT_ERR(accelrtFreeHost(&on_stack), accelrtErrorInvalidValue);
  void* d = nullptr;
  EXPECT_OK(accelrtMalloc(&d, 64));
  EXPECT_ERR(accelrtFreeHost(d), accelrtErrorInvalidValue); // device memory
  EXPECT_OK(accelrtFree(d));
  char* interior = nullptr;
  EXPECT_OK(accelrtMallocHost(reinterpret_cast<void**>(&interior), 64));
  EXPECT_ERR(accelrtFreeHost(interior + 8), accelrtErrorInvalidValue);
  EXPECT_OK(accelrtFreeHost(interior));

  void* huge = reinterpret_cast<void*>(0x1);
  EXPECT_ERR(accelrtMallocHost(&huge, SIZE_MAX / 2), accelrtErrorMemoryAllocation);
  EXPECT(huge == nullptr);
}

std::vector<unsigned char> pattern(size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<unsigned char>((i * 31 + seed) & 0xFF);
  return v;
}

void test_memcpy_kinds() {
  const size_t n = 1000;
  const std::vector<unsigned char> src = pattern(n, 7);
  std::vector<unsigned char> dst(n, 0);
  unsigned char* d0 = nullptr;
  unsigned char* d1 = nullptr;
  EXPECT_OK(accelrtSetDevice(0));
  EXPECT_OK(accelrtMalloc(reinterpret_cast<void**>(&d0), n));
  EXPECT_OK(accelrtSetDevice(1));
  EXPECT_OK(accelrtMalloc(reinterpret_cast<void**>(&d1), n));
  EXPECT_OK(accelrtSetDevice(0));

  // Explicit kinds: host -> device 0 -> device 1 (peer) -> host.
  EXPECT_OK(accelrtMemcpy(d0, src.data(), n, accelrtMemcpyHostToDevice));
  EXPECT(std::memcmp(d0, src.data(), n) == 0);
  EXPECT_OK(accelrtMemcpy(d1, d0, n, accelrtMemcpyDeviceToDevice));
  EXPECT_OK(accelrtMemcpy(dst.data(), d1, n, accelrtMemcpyDeviceToHost));
  EXPECT(dst == src);

  // Host to host.
  std::vector<unsigned char> dst2(n, 0);
  EXPECT_OK(accelrtMemcpy(dst2.data(), src.data(), n, accelrtMemcpyHostToHost));
  EXPECT(dst2 == src);

  // Default: inferred from the pointers, with pageable and pinned host memory.
  const std::vector<unsigned char> src2 = pattern(n, 99);
  EXPECT_OK(accelrtMemcpy(d1, src2.data(), n, accelrtMemcpyDefault));
  EXPECT_OK(accelrtMemcpy(d0, d1, n, accelrtMemcpyDefault));
  unsigned char* pinned = nullptr;
  EXPECT_OK(accelrtMallocHost(reinterpret_cast<void**>(&pinned), n));
  EXPECT_OK(accelrtMemcpy(pinned, d0, n, accelrtMemcpyDefault));
  EXPECT(std::memcmp(pinned, src2.data(), n) == 0);
  std::fill(dst.begin(), dst.end(), 0);
  EXPECT_OK(accelrtMemcpy(dst.data(), pinned, n, accelrtMemcpyDefault));
  EXPECT(dst == src2);
  EXPECT_OK(accelrtMemcpy(pinned, src.data(), n, accelrtMemcpyHostToHost));
  EXPECT(std::memcmp(pinned, src.data(), n) == 0);

  // Interior ranges: inside is fine, one byte past the end is not, and nothing is written.
  EXPECT_OK(accelrtMemcpy(d0 + 16, src.data(), n - 16, accelrtMemcpyHostToDevice));
  EXPECT(std::memcmp(d0 + 16, src.data(), n - 16) == 0);
  std::vector<unsigned char> before(d0, d0 + n);
  EXPECT_ERR(accelrtMemcpy(d0 + 16, src2.data(), n - 15, accelrtMemcpyHostToDevice), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtMemcpy(d0, src2.data(), n + 1, accelrtMemcpyHostToDevice), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtMemcpy(d0 + 16, src2.data(), n - 15, accelrtMemcpyDefault), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtMemcpy(d0, d1 + 1, n, accelrtMemcpyDeviceToDevice), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtMemcpy(d0, d1 + 1, n, accelrtMemcpyDefault), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtMemcpy(dst.data(), d1 + 500, 501, accelrtMemcpyDeviceToHost), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtMemcpy(d0, d1, SIZE_MAX, accelrtMemcpyDeviceToDevice), accelrtErrorInvalidValue);
  EXPECT(std::memcmp(d0, before.data(), n) == 0);

  // Device side that is not device memory.
  EXPECT_ERR(accelrtMemcpy(dst.data(), src.data(), n, accelrtMemcpyHostToDevice), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtMemcpy(dst.data(), src.data(), n, accelrtMemcpyDeviceToHost), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtMemcpy(pinned, d0, n, accelrtMemcpyDeviceToDevice), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtMemcpy(d0, pinned, n, accelrtMemcpyDeviceToDevice), accelrtErrorInvalidValue);

  // Overlapping device-to-device copy within one allocation behaves like memmove.
  EXPECT_OK(accelrtMemcpy(d0, src.data(), n, accelrtMemcpyHostToDevice));
  EXPECT_OK(accelrtMemcpy(d0 + 8, d0, n - 8, accelrtMemcpyDeviceToDevice));
  EXPECT(std::memcmp(d0 + 8, src.data(), n - 8) == 0);

  // NULL pointers, count 0, bad kinds.
  EXPECT_OK(accelrtMemcpy(nullptr, nullptr, 0, accelrtMemcpyHostToDevice));
  EXPECT_OK(accelrtMemcpy(d0, src.data(), 0, accelrtMemcpyDeviceToDevice));
  EXPECT_ERR(accelrtMemcpy(nullptr, src.data(), 4, accelrtMemcpyHostToHost), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtMemcpy(dst.data(), nullptr, 4, accelrtMemcpyHostToHost), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtMemcpy(d0, nullptr, 4, accelrtMemcpyDefault), accelrtErrorInvalidValue);
  // Bad kinds (passed from C, where any int is a valid enum value); also with count 0.
  EXPECT_ERR(accelrt_test_memcpy(dst.data(), src.data(), 4, 5), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrt_test_memcpy(dst.data(), src.data(), 4, -1), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrt_test_memcpy(dst.data(), src.data(), 0, 5), accelrtErrorInvalidValue);
  EXPECT_OK(accelrt_test_memcpy(dst.data(), src.data(), 4, accelrtMemcpyHostToHost));

  // Freed device memory is rejected.
  EXPECT_OK(accelrtFree(d1));
  EXPECT_ERR(accelrtMemcpy(dst.data(), d1, n, accelrtMemcpyDeviceToHost), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtMemcpy(d1, src.data(), n, accelrtMemcpyHostToDevice), accelrtErrorInvalidValue);
  EXPECT_OK(accelrtFree(d0));
  EXPECT_OK(accelrtFreeHost(pinned));
}

void test_memcpy_async() {
  const size_t n = 256;
  const std::vector<unsigned char> src = pattern(n, 3);
  std::vector<unsigned char> dst(n, 0);
  EXPECT_OK(accelrtSetDevice(1));
  unsigned char* d = nullptr;
  EXPECT_OK(accelrtMalloc(reinterpret_cast<void**>(&d), n));
  accelrtStream_t stream = nullptr;
  EXPECT_OK(accelrtStreamCreate(&stream));
  EXPECT_OK(accelrtMemcpyAsync(d, src.data(), n, accelrtMemcpyHostToDevice, stream));
  // Complete on return: no synchronization needed before reading.
  EXPECT(std::memcmp(d, src.data(), n) == 0);
  EXPECT_OK(accelrtMemcpyAsync(dst.data(), d, n, accelrtMemcpyDeviceToHost, nullptr));
  EXPECT(dst == src);
  EXPECT_OK(accelrtMemcpyAsync(dst.data(), d, n, accelrtMemcpyDefault, stream));
  EXPECT_ERR(accelrtMemcpyAsync(dst.data(), d, n + 1, accelrtMemcpyDeviceToHost, stream), accelrtErrorInvalidValue);
  EXPECT_OK(accelrtMemcpyAsync(nullptr, nullptr, 0, accelrtMemcpyDeviceToHost, stream));
  EXPECT_OK(accelrtStreamDestroy(stream));
  EXPECT_ERR(
      accelrtMemcpyAsync(dst.data(), d, n, accelrtMemcpyDeviceToHost, stream), accelrtErrorInvalidResourceHandle);
  EXPECT_ERR(
      accelrtMemcpyAsync(dst.data(), d, n, accelrtMemcpyDeviceToHost, reinterpret_cast<accelrtStream_t>(0xdeadbeef)),
      accelrtErrorInvalidResourceHandle);
  EXPECT_OK(accelrtFree(d));
  EXPECT_OK(accelrtSetDevice(0));
}

void test_memset() {
  const size_t n = 128;
  unsigned char* d = nullptr;
  EXPECT_OK(accelrtMalloc(reinterpret_cast<void**>(&d), n));
  std::vector<unsigned char> host(n, 0);
  EXPECT_OK(accelrtMemset(d, 0xAB, n));
  EXPECT_OK(accelrtMemcpy(host.data(), d, n, accelrtMemcpyDeviceToHost));
  EXPECT(std::all_of(host.begin(), host.end(), [](unsigned char c) { return c == 0xAB; }));
  // Only the low byte of value is used; interior ranges are fine.
  EXPECT_OK(accelrtMemset(d + 64, 0x1CD, 64));
  EXPECT_OK(accelrtMemcpy(host.data(), d, n, accelrtMemcpyDeviceToHost));
  EXPECT(host[63] == 0xAB);
  EXPECT(host[64] == 0xCD);
  EXPECT(host[127] == 0xCD);
  // Range validation: nothing written on failure.
  EXPECT_ERR(accelrtMemset(d + 64, 0, 65), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtMemset(d, 0, n + 1), accelrtErrorInvalidValue);
  EXPECT(d[64] == 0xCD);
  EXPECT(d[0] == 0xAB);
  EXPECT_ERR(accelrtMemset(host.data(), 0, n), accelrtErrorInvalidValue); // not device memory
  void* pinned = nullptr;
  EXPECT_OK(accelrtMallocHost(&pinned, 16));
  EXPECT_ERR(accelrtMemset(pinned, 0, 16), accelrtErrorInvalidValue);
  EXPECT_OK(accelrtFreeHost(pinned));
  EXPECT_OK(accelrtMemset(nullptr, 0, 0));
  EXPECT_ERR(accelrtMemset(nullptr, 0, 1), accelrtErrorInvalidValue);
  EXPECT_OK(accelrtFree(d));
  EXPECT_ERR(accelrtMemset(d, 0, 1), accelrtErrorInvalidValue); // freed
}

void test_streams() {
  int least = 99, greatest = 99;
  EXPECT_OK(accelrtDeviceGetStreamPriorityRange(&least, &greatest));
  EXPECT(least == 0);
  EXPECT(greatest == -1);
  EXPECT_OK(accelrtDeviceGetStreamPriorityRange(nullptr, &greatest));
  EXPECT_OK(accelrtDeviceGetStreamPriorityRange(&least, nullptr));

  std::vector<accelrtStream_t> streams;
  for (int d = 0; d < 3; ++d) {
    EXPECT_OK(accelrtSetDevice(d));
    accelrtStream_t s = nullptr;
    EXPECT_OK(accelrtStreamCreate(&s));
    EXPECT(s != nullptr);
    int device = -1, priority = 99;
    EXPECT_OK(accelrtStreamGetDevice(s, &device));
    EXPECT(device == d);
    EXPECT_OK(accelrtStreamGetPriority(s, &priority));
    EXPECT(priority == 0);
    EXPECT_OK(accelrtStreamQuery(s));
    EXPECT_OK(accelrtStreamSynchronize(s));
    streams.push_back(s);

    // Priorities in range are kept, outside are clamped.
    const int requested[] = {-1, 0, -5, 3, -1000000, 1000000};
    const int expected[] = {-1, 0, -1, 0, -1, 0};
    for (int i = 0; i < 6; ++i) {
      accelrtStream_t p = nullptr;
      EXPECT_OK(accelrtStreamCreateWithPriority(&p, accelrtStreamDefault, requested[i]));
      EXPECT_OK(accelrtStreamGetPriority(p, &priority));
      EXPECT(priority == expected[i]);
      EXPECT_OK(accelrtStreamGetDevice(p, &device));
      EXPECT(device == d);
      streams.push_back(p);
    }
    accelrtStream_t nb = nullptr;
    EXPECT_OK(accelrtStreamCreateWithPriority(&nb, accelrtStreamNonBlocking, -1));
    streams.push_back(nb);

    // The default stream (NULL) belongs to the current device.
    EXPECT_OK(accelrtStreamGetDevice(nullptr, &device));
    EXPECT(device == d);
    EXPECT_OK(accelrtStreamGetPriority(nullptr, &priority));
    EXPECT(priority == 0);
    EXPECT_OK(accelrtStreamQuery(nullptr));
    EXPECT_OK(accelrtStreamSynchronize(nullptr));
  }
  // A stream keeps its device when the current device changes.
  EXPECT_OK(accelrtSetDevice(0));
  int device = -1;
  EXPECT_OK(accelrtStreamGetDevice(streams.back(), &device));
  EXPECT(device == 2);

  // Handles are distinct.
  std::vector<accelrtStream_t> sorted = streams;
  std::sort(sorted.begin(), sorted.end());
  EXPECT(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());

  accelrtStream_t s = nullptr;
  EXPECT_ERR(accelrtStreamCreate(nullptr), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtStreamCreateWithPriority(nullptr, 0, 0), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtStreamCreateWithPriority(&s, 0x4, 0), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtStreamGetDevice(streams[0], nullptr), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtStreamGetPriority(streams[0], nullptr), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtStreamDestroy(nullptr), accelrtErrorInvalidResourceHandle);

  for (accelrtStream_t st : streams)
    EXPECT_OK(accelrtStreamDestroy(st));
}

void host_fn_increment(void* data) {
  ++*static_cast<int*>(data);
}

void test_destroyed_and_garbage_handles() {
  accelrtStream_t stream = nullptr;
  EXPECT_OK(accelrtStreamCreate(&stream));
  accelrtEvent_t event = nullptr;
  EXPECT_OK(accelrtEventCreate(&event));
  EXPECT_OK(accelrtStreamDestroy(stream));
  EXPECT_OK(accelrtEventDestroy(event));

  int on_stack = 0;
  const accelrtStream_t bad_streams[] = {
      stream,
      reinterpret_cast<accelrtStream_t>(0x1),
      reinterpret_cast<accelrtStream_t>(0xdeadbeef),
      reinterpret_cast<accelrtStream_t>(&on_stack),
  };
  accelrtEvent_t live_event = nullptr;
  EXPECT_OK(accelrtEventCreate(&live_event));
  int value = 0;
  char buf[4] = {};
  for (accelrtStream_t s : bad_streams) {
    int device = -1, priority = 0;
    EXPECT_ERR(accelrtStreamDestroy(s), accelrtErrorInvalidResourceHandle);
    EXPECT_ERR(accelrtStreamQuery(s), accelrtErrorInvalidResourceHandle);
    EXPECT_ERR(accelrtStreamSynchronize(s), accelrtErrorInvalidResourceHandle);
    EXPECT_ERR(accelrtStreamGetDevice(s, &device), accelrtErrorInvalidResourceHandle);
    EXPECT_ERR(accelrtStreamGetPriority(s, &priority), accelrtErrorInvalidResourceHandle);
    EXPECT_ERR(accelrtStreamWaitEvent(s, live_event, 0), accelrtErrorInvalidResourceHandle);
    EXPECT_ERR(accelrtLaunchHostFunc(s, host_fn_increment, &value), accelrtErrorInvalidResourceHandle);
    EXPECT_ERR(accelrtMemcpyAsync(buf, buf + 2, 2, accelrtMemcpyHostToHost, s), accelrtErrorInvalidResourceHandle);
    EXPECT_ERR(accelrtEventRecord(live_event, s), accelrtErrorInvalidResourceHandle);
  }
  EXPECT(value == 0); // the host function never ran

  const accelrtEvent_t bad_events[] = {
      event,
      nullptr,
      reinterpret_cast<accelrtEvent_t>(0x1),
      reinterpret_cast<accelrtEvent_t>(0xdeadbeef),
      reinterpret_cast<accelrtEvent_t>(&on_stack),
  };
  EXPECT_OK(accelrtEventRecord(live_event, nullptr));
  for (accelrtEvent_t e : bad_events) {
    float ms = 0;
    EXPECT_ERR(accelrtEventDestroy(e), accelrtErrorInvalidResourceHandle);
    EXPECT_ERR(accelrtEventQuery(e), accelrtErrorInvalidResourceHandle);
    EXPECT_ERR(accelrtEventSynchronize(e), accelrtErrorInvalidResourceHandle);
    EXPECT_ERR(accelrtEventRecord(e, nullptr), accelrtErrorInvalidResourceHandle);
    EXPECT_ERR(accelrtEventElapsedTime(&ms, e, live_event), accelrtErrorInvalidResourceHandle);
    EXPECT_ERR(accelrtEventElapsedTime(&ms, live_event, e), accelrtErrorInvalidResourceHandle);
    EXPECT_ERR(accelrtStreamWaitEvent(nullptr, e, 0), accelrtErrorInvalidResourceHandle);
  }

  // A stream handle is never an event handle and vice versa.
  accelrtStream_t live_stream = nullptr;
  EXPECT_OK(accelrtStreamCreate(&live_stream));
  EXPECT_ERR(accelrtEventQuery(reinterpret_cast<accelrtEvent_t>(live_stream)), accelrtErrorInvalidResourceHandle);
  EXPECT_ERR(accelrtStreamQuery(reinterpret_cast<accelrtStream_t>(live_event)), accelrtErrorInvalidResourceHandle);
  // Handles are not reused after destruction.
  EXPECT(live_stream != stream);
  EXPECT(live_event != event);
  EXPECT_OK(accelrtStreamDestroy(live_stream));
  EXPECT_OK(accelrtEventDestroy(live_event));
}

void test_events() {
  accelrtEvent_t e = nullptr;
  EXPECT_OK(accelrtEventCreate(&e));
  EXPECT(e != nullptr);
  // Never recorded: complete.
  EXPECT_OK(accelrtEventQuery(e));
  EXPECT_OK(accelrtEventSynchronize(e));
  EXPECT_OK(accelrtEventRecord(e, nullptr));
  EXPECT_OK(accelrtEventQuery(e));
  EXPECT_OK(accelrtEventSynchronize(e));

  // Recording on streams of every device, including a device other than the event's.
  for (int d = 0; d < 3; ++d) {
    EXPECT_OK(accelrtSetDevice(d));
    accelrtStream_t s = nullptr;
    EXPECT_OK(accelrtStreamCreate(&s));
    EXPECT_OK(accelrtEventRecord(e, s));
    EXPECT_OK(accelrtEventQuery(e));
    EXPECT_OK(accelrtEventRecord(e, nullptr));
    EXPECT_OK(accelrtStreamDestroy(s));
  }
  EXPECT_OK(accelrtSetDevice(0));
  EXPECT_OK(accelrtEventDestroy(e));

  for (unsigned flags = 0; flags < 4; ++flags) {
    accelrtEvent_t f = nullptr;
    EXPECT_OK(accelrtEventCreateWithFlags(&f, flags));
    EXPECT_OK(accelrtEventRecord(f, nullptr));
    EXPECT_OK(accelrtEventQuery(f));
    EXPECT_OK(accelrtEventSynchronize(f));
    EXPECT_OK(accelrtEventDestroy(f));
  }
  accelrtEvent_t f = nullptr;
  EXPECT_ERR(accelrtEventCreateWithFlags(&f, 4), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtEventCreateWithFlags(&f, 0x80000000u), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtEventCreateWithFlags(nullptr, 0), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtEventCreate(nullptr), accelrtErrorInvalidValue);
}

void test_elapsed_time() {
  accelrtEvent_t start = nullptr, end = nullptr;
  EXPECT_OK(accelrtEventCreate(&start));
  EXPECT_OK(accelrtEventCreateWithFlags(&end, accelrtEventBlockingSync));
  accelrtStream_t stream = nullptr;
  EXPECT_OK(accelrtStreamCreate(&stream));

  float ms = -1;
  // Never recorded -> NotReady.
  EXPECT_ERR(accelrtEventElapsedTime(&ms, start, end), accelrtErrorNotReady);
  EXPECT_OK(accelrtEventRecord(start, stream));
  EXPECT_ERR(accelrtEventElapsedTime(&ms, start, end), accelrtErrorNotReady);
  EXPECT_ERR(accelrtEventElapsedTime(&ms, end, start), accelrtErrorNotReady);
  busy_wait(std::chrono::microseconds(2000));
  EXPECT_OK(accelrtEventRecord(end, stream));
  EXPECT_OK(accelrtEventElapsedTime(&ms, start, end));
  EXPECT(ms > 0.0f);
  EXPECT(ms >= 1.99f);
  EXPECT(ms < 10000.0f);
  float reverse = 0;
  EXPECT_OK(accelrtEventElapsedTime(&reverse, end, start));
  EXPECT(reverse < 0.0f);
  EXPECT(reverse == -ms);
  float same = -1;
  EXPECT_OK(accelrtEventElapsedTime(&same, start, start));
  EXPECT(same == 0.0f);
  EXPECT_ERR(accelrtEventElapsedTime(nullptr, start, end), accelrtErrorInvalidValue);

  // Timing disabled -> InvalidResourceHandle, recorded or not, whichever side.
  accelrtEvent_t untimed = nullptr;
  EXPECT_OK(accelrtEventCreateWithFlags(&untimed, accelrtEventDisableTiming));
  EXPECT_ERR(accelrtEventElapsedTime(&ms, untimed, end), accelrtErrorInvalidResourceHandle);
  EXPECT_OK(accelrtEventRecord(untimed, nullptr));
  EXPECT_ERR(accelrtEventElapsedTime(&ms, start, untimed), accelrtErrorInvalidResourceHandle);
  EXPECT_ERR(accelrtEventElapsedTime(&ms, untimed, end), accelrtErrorInvalidResourceHandle);

  // Events recorded on different devices' streams can be compared.
  EXPECT_OK(accelrtSetDevice(2));
  accelrtEvent_t later = nullptr;
  EXPECT_OK(accelrtEventCreate(&later));
  EXPECT_OK(accelrtEventRecord(later, nullptr));
  EXPECT_OK(accelrtEventElapsedTime(&ms, start, later));
  EXPECT(ms >= 1.99f);
  EXPECT_OK(accelrtSetDevice(0));

  EXPECT_OK(accelrtEventDestroy(later));
  EXPECT_OK(accelrtEventDestroy(untimed));
  EXPECT_OK(accelrtEventDestroy(start));
  EXPECT_OK(accelrtEventDestroy(end));
  EXPECT_OK(accelrtStreamDestroy(stream));
}

void test_stream_wait_event() {
  EXPECT_OK(accelrtSetDevice(1));
  accelrtStream_t s1 = nullptr;
  EXPECT_OK(accelrtStreamCreate(&s1));
  EXPECT_OK(accelrtSetDevice(2));
  accelrtStream_t s2 = nullptr;
  EXPECT_OK(accelrtStreamCreateWithPriority(&s2, accelrtStreamNonBlocking, -1));
  accelrtEvent_t e = nullptr;
  EXPECT_OK(accelrtEventCreate(&e));

  EXPECT_OK(accelrtStreamWaitEvent(s2, e, 0)); // never recorded: nothing to wait for
  EXPECT_OK(accelrtEventRecord(e, s1));        // cross-device record
  EXPECT_OK(accelrtStreamWaitEvent(s2, e, 0)); // cross-device wait
  EXPECT_OK(accelrtStreamWaitEvent(nullptr, e, 0));
  EXPECT_OK(accelrtStreamWaitEvent(s1, e, 0));
  EXPECT_OK(accelrtStreamQuery(s2));
  EXPECT_ERR(accelrtStreamWaitEvent(s2, e, 1), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtStreamWaitEvent(s2, nullptr, 0), accelrtErrorInvalidResourceHandle);

  EXPECT_OK(accelrtEventDestroy(e));
  EXPECT_ERR(accelrtStreamWaitEvent(s2, e, 0), accelrtErrorInvalidResourceHandle);
  EXPECT_OK(accelrtStreamDestroy(s1));
  EXPECT_OK(accelrtStreamDestroy(s2));
  EXPECT_OK(accelrtSetDevice(0));
}

struct HostFnData {
  int calls = 0;
  std::thread::id thread;
  const unsigned char* device_data = nullptr;
  unsigned char first_byte = 0;
};

void host_fn_record(void* user_data) {
  HostFnData* data = static_cast<HostFnData*>(user_data);
  ++data->calls;
  data->thread = std::this_thread::get_id();
  if (data->device_data != nullptr)
    data->first_byte = data->device_data[0];
}

void test_launch_host_func() {
  HostFnData data;
  EXPECT_OK(accelrtLaunchHostFunc(nullptr, host_fn_record, &data));
  EXPECT(data.calls == 1);
  EXPECT(data.thread == std::this_thread::get_id());

  // Work enqueued before the host function is visible to it.
  accelrtStream_t s = nullptr;
  EXPECT_OK(accelrtStreamCreate(&s));
  unsigned char* d = nullptr;
  EXPECT_OK(accelrtMalloc(reinterpret_cast<void**>(&d), 8));
  const unsigned char value = 0x42;
  EXPECT_OK(accelrtMemcpyAsync(d, &value, 1, accelrtMemcpyHostToDevice, s));
  data.device_data = d;
  EXPECT_OK(accelrtLaunchHostFunc(s, host_fn_record, &data));
  EXPECT(data.calls == 2);
  EXPECT(data.first_byte == 0x42);

  int counter = 0;
  EXPECT_OK(accelrtLaunchHostFunc(s, host_fn_increment, &counter));
  EXPECT(counter == 1);
  EXPECT_OK(accelrtLaunchHostFunc(
      s, [](void*) {}, nullptr)); // NULL user data is fine
  EXPECT_ERR(accelrtLaunchHostFunc(s, nullptr, &counter), accelrtErrorInvalidValue);
  EXPECT_OK(accelrtFree(d));
  EXPECT_OK(accelrtStreamDestroy(s));
}

void test_concurrent_malloc_free() {
  constexpr int kThreads = 4;
  constexpr int kIterations = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t]() {
      const int device = t % 3;
      EXPECT_OK(accelrtSetDevice(device));
      std::mt19937 rng(static_cast<unsigned>(t) * 7919u + 1u);
      std::vector<std::pair<unsigned char*, size_t>> live;
      for (int i = 0; i < kIterations; ++i) {
        if (live.size() < 16 && (live.empty() || rng() % 3 != 0)) {
          const size_t size = 1 + rng() % 4096;
          unsigned char* p = nullptr;
          const accelrtError_t err = accelrtMalloc(reinterpret_cast<void**>(&p), size);
          EXPECT_OK(err);
          if (err != accelrtSuccess)
            continue;
          EXPECT(aligned64(p));
          std::memset(p, t, size);
          live.emplace_back(p, size);
        } else {
          const size_t index = rng() % live.size();
          auto [p, size] = live[index];
          accelrtPointerAttributes attr;
          EXPECT_OK(accelrtPointerGetAttributes(&attr, p + size - 1));
          EXPECT(
              attr.type == accelrtMemoryTypeDevice && attr.device == device && attr.basePointer == p &&
              attr.size == size);
          EXPECT(p[0] == static_cast<unsigned char>(t) && p[size - 1] == static_cast<unsigned char>(t));
          EXPECT_OK(accelrtFree(p));
          live[index] = live.back();
          live.pop_back();
        }
        if (i % 64 == 0) { // exercise the handle registries concurrently too
          accelrtStream_t s = nullptr;
          accelrtEvent_t e = nullptr;
          EXPECT_OK(accelrtStreamCreate(&s));
          EXPECT_OK(accelrtEventCreate(&e));
          EXPECT_OK(accelrtEventRecord(e, s));
          EXPECT_OK(accelrtStreamWaitEvent(s, e, 0));
          EXPECT_OK(accelrtEventDestroy(e));
          EXPECT_OK(accelrtStreamDestroy(s));
        }
      }
      for (auto& entry : live)
        EXPECT_OK(accelrtFree(entry.first));
    });
  }
  for (std::thread& th : threads)
    th.join();
  for (int d = 0; d < 3; ++d) {
    accelrtMemoryStats stats;
    EXPECT_OK(accelrtDeviceGetMemoryStats(d, &stats));
    EXPECT(stats.allocatedBytes == 0);
    EXPECT(stats.allocationCount == 0);
    EXPECT(stats.peakAllocatedBytes > 0 || d != 0);
  }
}

} // namespace

// Fault injection: the nth operation of a kind fails once, draws by probability repeat for the same
// seed, a failed operation has no effect, and disarming restores normal operation.
void test_fault_injection() {
  unsigned long long operations = 0;
  unsigned long long injected = 0;
  EXPECT_ERR(accelrtFaultInject(static_cast<accelrtFaultKind>(3), 1, 0.0, 0), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtFaultInject(accelrtFaultAllocation, 0, 1.5, 0), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtFaultInject(accelrtFaultAllocation, 0, -0.1, 0), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtFaultCheck(static_cast<accelrtFaultKind>(-1)), accelrtErrorInvalidValue);

  // The 3rd allocation fails, once, and leaves the statistics alone.
  accelrtMemoryStats before{};
  EXPECT_OK(accelrtDeviceGetMemoryStats(0, &before));
  EXPECT_OK(accelrtFaultInject(accelrtFaultAllocation, 3, 0.0, 0));
  void* blocks[4] = {};
  EXPECT_OK(accelrtMalloc(&blocks[0], 128));
  EXPECT_OK(accelrtMalloc(&blocks[1], 128));
  blocks[2] = &operations;
  EXPECT_ERR(accelrtMalloc(&blocks[2], 128), accelrtErrorMemoryAllocation);
  EXPECT(blocks[2] == nullptr);
  EXPECT_OK(accelrtMalloc(&blocks[3], 128));
  EXPECT_OK(accelrtFaultGetCounts(accelrtFaultAllocation, &operations, &injected));
  EXPECT(operations == 4 && injected == 1);
  accelrtMemoryStats during{};
  EXPECT_OK(accelrtDeviceGetMemoryStats(0, &during));
  EXPECT(during.allocationCount == before.allocationCount + 3);
  for (void* block : blocks)
    EXPECT_OK(accelrtFree(block));
  EXPECT_OK(accelrtFaultInject(accelrtFaultAllocation, 0, 0.0, 0));
  accelrtMemoryStats after{};
  EXPECT_OK(accelrtDeviceGetMemoryStats(0, &after));
  EXPECT(after.allocatedBytes == before.allocatedBytes && after.allocationCount == before.allocationCount);

  // Draws by probability: the same seed fails the same operations; about p of them fail.
  const auto pattern = [](unsigned long long seed) {
    EXPECT_OK(accelrtFaultInject(accelrtFaultCopy, 0, 0.25, seed));
    unsigned long long bits = 0;
    for (int i = 0; i < 64; ++i) {
      if (accelrtFaultCheck(accelrtFaultCopy) != accelrtSuccess)
        bits |= 1ull << i;
    }
    return bits;
  };
  const unsigned long long first = pattern(7);
  EXPECT(first == pattern(7));
  EXPECT(first != pattern(8));
  const int failures = __builtin_popcountll(first);
  EXPECT(failures >= 6 && failures <= 26);
  EXPECT_OK(accelrtFaultGetCounts(accelrtFaultCopy, &operations, &injected));
  EXPECT(operations == 64);

  // A failed copy writes nothing; probability 1 fails every operation.
  EXPECT_OK(accelrtFaultInject(accelrtFaultCopy, 0, 1.0, 0));
  void* device = nullptr;
  EXPECT_OK(accelrtMalloc(&device, 8));
  EXPECT_OK(accelrtMemset(device, 0, 0)); // nothing to copy: not an operation
  unsigned char host[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_ERR(accelrtMemcpy(device, host, 8, accelrtMemcpyHostToDevice), accelrtErrorInjectedFault);
  EXPECT_ERR(accelrtMemset(device, 0xff, 8), accelrtErrorInjectedFault);
  EXPECT_ERR(accelrtMemcpyAsync(device, host, 8, accelrtMemcpyHostToDevice, nullptr), accelrtErrorInjectedFault);
  EXPECT_OK(accelrtFaultInject(accelrtFaultCopy, 0, 0.0, 0));
  EXPECT_OK(accelrtMemset(device, 0, 8));
  EXPECT_OK(accelrtMemcpy(device, host, 8, accelrtMemcpyHostToDevice));
  unsigned char back[8] = {};
  EXPECT_OK(accelrtMemcpy(back, device, 8, accelrtMemcpyDeviceToHost));
  EXPECT(std::memcmp(back, host, 8) == 0);
  EXPECT_OK(accelrtFree(device));

  // Stream and event operations; a failed record leaves the event unrecorded.
  accelrtEvent_t start = nullptr;
  accelrtEvent_t end = nullptr;
  EXPECT_OK(accelrtEventCreate(&start));
  EXPECT_OK(accelrtEventCreate(&end));
  EXPECT_OK(accelrtEventRecord(start, nullptr));
  // An event's device: current at creation, then its stream's (here device 1's default stream).
  int event_device = -1;
  EXPECT_OK(accelrtEventGetDevice(start, &event_device));
  EXPECT(event_device == 0);
  EXPECT_OK(accelrtSetDevice(1));
  EXPECT_OK(accelrtEventRecord(start, nullptr));
  EXPECT_OK(accelrtSetDevice(0));
  EXPECT_OK(accelrtEventGetDevice(start, &event_device));
  EXPECT(event_device == 1);
  EXPECT_ERR(accelrtEventGetDevice(start, nullptr), accelrtErrorInvalidValue);
  EXPECT_ERR(accelrtEventGetDevice(nullptr, &event_device), accelrtErrorInvalidResourceHandle);
  EXPECT_OK(accelrtFaultInject(accelrtFaultStreamEvent, 0, 1.0, 0));
  accelrtEvent_t not_created = nullptr;
  EXPECT_ERR(accelrtEventCreate(&not_created), accelrtErrorInjectedFault);
  EXPECT(not_created == nullptr);
  EXPECT_ERR(accelrtEventRecord(end, nullptr), accelrtErrorInjectedFault);
  EXPECT_ERR(accelrtEventQuery(start), accelrtErrorInjectedFault);
  EXPECT_ERR(accelrtEventSynchronize(start), accelrtErrorInjectedFault);
  EXPECT_ERR(accelrtStreamQuery(nullptr), accelrtErrorInjectedFault);
  EXPECT_ERR(accelrtStreamSynchronize(nullptr), accelrtErrorInjectedFault);
  EXPECT_ERR(accelrtStreamWaitEvent(nullptr, start, 0), accelrtErrorInjectedFault);
  EXPECT_ERR(accelrtDeviceSynchronize(), accelrtErrorInjectedFault);
  accelrtStream_t stream = nullptr;
  EXPECT_ERR(accelrtStreamCreate(&stream), accelrtErrorInjectedFault);
  int calls = 0;
  EXPECT_ERR(
      accelrtLaunchHostFunc(
          nullptr, [](void* n) { ++*static_cast<int*>(n); }, &calls),
      accelrtErrorInjectedFault);
  EXPECT(calls == 0);
  // Invalid arguments are reported as such, before any fault.
  EXPECT_ERR(accelrtEventQuery(nullptr), accelrtErrorInvalidResourceHandle);
  EXPECT_OK(accelrtFaultInject(accelrtFaultStreamEvent, 0, 0.0, 0));
  float ms = 0;
  EXPECT_ERR(accelrtEventElapsedTime(&ms, start, end), accelrtErrorNotReady); // end was never recorded
  EXPECT_OK(accelrtEventDestroy(start));
  EXPECT_OK(accelrtEventDestroy(end));
  EXPECT_OK(accelrtFaultGetCounts(accelrtFaultStreamEvent, &operations, &injected));
  EXPECT(operations == 0 && injected == 0);
}

int main() {
  // Fresh-runtime tests in forked children, while the parent has not touched any device.
  const TestCase fork_tests[] = {
      {"env_device_count", test_env_device_count},
      {"set_device_count_validation", test_set_device_count_validation},
      {"zero_devices", test_zero_devices},
  };
  for (const TestCase& test : fork_tests)
    run_test(test);

  // The parent fixes the device count to 3 before anything else touches devices.
  const TestCase tests[] = {
      {"set_device_count", test_set_device_count},
      {"error_strings", test_error_strings},
      {"current_device", test_current_device},
      {"device_synchronize", test_device_synchronize},
      {"device_properties", test_device_properties},
      {"malloc_free", test_malloc_free},
      {"malloc_reuses_freed_memory", test_malloc_reuses_freed_memory},
      {"memory_limit_and_oom", test_memory_limit_and_oom},
      {"memory_stats", test_memory_stats},
      {"pointer_attributes", test_pointer_attributes},
      {"host_alloc", test_host_alloc},
      {"memcpy_kinds", test_memcpy_kinds},
      {"memcpy_async", test_memcpy_async},
      {"memset", test_memset},
      {"streams", test_streams},
      {"destroyed_and_garbage_handles", test_destroyed_and_garbage_handles},
      {"events", test_events},
      {"elapsed_time", test_elapsed_time},
      {"stream_wait_event", test_stream_wait_event},
      {"launch_host_func", test_launch_host_func},
      {"concurrent_malloc_free", test_concurrent_malloc_free},
      {"fault_injection", test_fault_injection},
  };
  for (const TestCase& test : tests)
    run_test(test);

  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed > 0 ? 1 : 0;
}
