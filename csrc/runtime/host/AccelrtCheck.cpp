#include <csrc/runtime/host/AccelrtCheck.h>

#include <c10/util/Exception.h>

#include <string>

namespace torch_accel {

void throwAccelrtErrorOn(int device, accelrtError_t error, const char* call) {
  const std::string where = device >= 0 ? c10::str("accel:", device) : "accel";
  TORCH_CHECK(
      false,
      where,
      " (host runtime) error: ",
      accelrtGetErrorString(error),
      " (",
      accelrtGetErrorName(error),
      " from ",
      call,
      ")");
}

void throwAccelrtError(accelrtError_t error, const char* call) {
  int device = -1;
  if (accelrtGetDevice(&device) != accelrtSuccess) {
    device = -1;
  }
  throwAccelrtErrorOn(device, error, call);
}

void throwAccelrtEventError(accelrtEvent_t event, accelrtError_t error, const char* call) {
  int device = -1;
  if (accelrtEventGetDevice(event, &device) != accelrtSuccess) {
    device = -1;
  }
  throwAccelrtErrorOn(device, error, call);
}

} // namespace torch_accel
