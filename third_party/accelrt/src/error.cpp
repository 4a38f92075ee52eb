// Error codes: names and descriptions.
#include "internal.h"

extern "C" {

const char* accelrtGetErrorString(accelrtError_t error) {
  switch (accelrt::detail::enum_value(error)) {
  case accelrtSuccess:
    return "no error";
  case accelrtErrorInvalidValue:
    return "invalid argument";
  case accelrtErrorMemoryAllocation:
    return "out of memory";
  case accelrtErrorInvalidDevice:
    return "invalid device ordinal";
  case accelrtErrorNoDevice:
    return "no accelrt device is available";
  case accelrtErrorInvalidResourceHandle:
    return "invalid resource handle";
  case accelrtErrorNotReady:
    return "device not ready";
  case accelrtErrorAlreadyInitialized:
    return "device count already initialized";
  case accelrtErrorInjectedFault:
    return "injected fault";
  }
  return "unrecognized error code";
}

const char* accelrtGetErrorName(accelrtError_t error) {
  switch (accelrt::detail::enum_value(error)) {
  case accelrtSuccess:
    return "accelrtSuccess";
  case accelrtErrorInvalidValue:
    return "accelrtErrorInvalidValue";
  case accelrtErrorMemoryAllocation:
    return "accelrtErrorMemoryAllocation";
  case accelrtErrorInvalidDevice:
    return "accelrtErrorInvalidDevice";
  case accelrtErrorNoDevice:
    return "accelrtErrorNoDevice";
  case accelrtErrorInvalidResourceHandle:
    return "accelrtErrorInvalidResourceHandle";
  case accelrtErrorNotReady:
    return "accelrtErrorNotReady";
  case accelrtErrorAlreadyInitialized:
    return "accelrtErrorAlreadyInitialized";
  case accelrtErrorInjectedFault:
    return "accelrtErrorInjectedFault";
  }
  return "unrecognized error code";
}

} // extern "C"
