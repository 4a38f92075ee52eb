#pragma once

#include <atomic>
#include <thread>

namespace torch_accel {

// A mutex for the host runtime's per-allocation bookkeeping (HostMemoryLedger),
// whose critical sections take a few dozen instructions on every tensor
// allocation and free: uncontended, lock and unlock are one atomic exchange
// and one store, where std::mutex makes two calls into the C library. A
// waiter yields its CPU between tries, so that a holder doing longer work
// (a snapshot) or preempted still makes progress.
class SpinMutex {
public:
  void lock() noexcept {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed)) {
        std::this_thread::yield();
      }
    }
  }

  bool try_lock() noexcept {
    return !locked_.exchange(true, std::memory_order_acquire);
  }

  void unlock() noexcept {
    locked_.store(false, std::memory_order_release);
  }

private:
  std::atomic<bool> locked_{false};
};

} // namespace torch_accel
