// The name "accel" of the PrivateUse1 device type, registered when accel's
// core is loaded, before anything can parse or print an accel device: a C++
// program that links the core (docs/compile.md, "A C++ program without
// Python") parses "accel:0" as Python does. torch_accel's Python package
// registers the same name again (torch.utils.rename_privateuse1_backend),
// which c10 accepts, and which gives torch's Python side the name too.
#include <csrc/core/AccelDevice.h>

#include <c10/core/DeviceType.h>

namespace torch_accel {
namespace {

const bool registered_name = [] {
  c10::register_privateuse1_backend("accel");
  return true;
}();

} // namespace
} // namespace torch_accel
