#pragma once

#include <accelrt/accelrt.h>
#include <c10/macros/Macros.h>

namespace torch_accel {

// Throws the RuntimeError for `error`, returned by the accelrt call `call`:
// it names the calling thread's current accel device (every host runtime
// call that acts on a device makes it current first), the error and the
// call, as C10_CUDA_CHECK's message does for CUDA.
[[noreturn]] void throwAccelrtError(accelrtError_t error, const char* call);

// The same, naming accel:`device` (-1: no device).
[[noreturn]] void throwAccelrtErrorOn(int device, accelrtError_t error, const char* call);

// The same, naming the device of `event` (an event that is not live: none).
[[noreturn]] void throwAccelrtEventError(accelrtEvent_t event, accelrtError_t error, const char* call);

} // namespace torch_accel

// Turns an accelrt error into a RuntimeError that names the current device
// and the failed call; a success costs one predictable branch.
#define TORCH_ACCEL_ACCELRT_CHECK(EXPR)                                                                                \
  do {                                                                                                                 \
    const accelrtError_t torch_accel_err = (EXPR);                                                                     \
    if (C10_UNLIKELY(torch_accel_err != accelrtSuccess)) {                                                             \
      ::torch_accel::throwAccelrtError(torch_accel_err, #EXPR);                                                        \
    }                                                                                                                  \
  } while (0)

// The same for a call on `EVENT`, naming the event's device: the current
// device need not be the event's (Event.query and synchronize set none).
#define TORCH_ACCEL_ACCELRT_EVENT_CHECK(EVENT, EXPR)                                                                   \
  do {                                                                                                                 \
    const accelrtError_t torch_accel_err = (EXPR);                                                                     \
    if (C10_UNLIKELY(torch_accel_err != accelrtSuccess)) {                                                             \
      ::torch_accel::throwAccelrtEventError((EVENT), torch_accel_err, #EXPR);                                          \
    }                                                                                                                  \
  } while (0)
