#include <csrc/runtime/Graph.h>
#include <csrc/runtime/Runtime.h>

#include <c10/util/Exception.h>

namespace torch_accel {

CaptureMode captureModeFromName(const std::string& name) {
  if (name == "global") {
    return CaptureMode::Global;
  }
  if (name == "thread_local") {
    return CaptureMode::ThreadLocal;
  }
  if (name == "relaxed") {
    return CaptureMode::Relaxed;
  }
  TORCH_CHECK(false, "Unknown capture error mode. Expected `global`, `thread_local`, or `relaxed`, got ", name);
}

void checkCaptureStream() {
  const Runtime& rt = runtime();
  const c10::Device device = rt.getDevice();
  TORCH_CHECK(
      rt.getStream(device) != rt.getDefaultStream(device),
      "accel graphs must be captured on a non-default stream. (However, after capture, it's ok to replay them on the "
      "default stream.)");
}

} // namespace torch_accel
