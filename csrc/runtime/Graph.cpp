#include <csrc/runtime/Graph.h>

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

} // namespace torch_accel
