#include <csrc/runtime/Graph.h>
#include <csrc/runtime/Runtime.h>

#include <c10/util/Exception.h>

#include <mutex>
#include <set>

namespace torch_accel {
namespace {

// The shared pools graphs are capturing into.
std::mutex pools_mutex;
std::set<c10::MempoolId_t> pools_capturing;

} // namespace

void SharedPoolClaim::claim(c10::MempoolId_t pool) {
  TORCH_CHECK_VALUE(
      pool.first == 0 || pool.second == 0,
      "accel graph: pool=(",
      pool.first,
      ", ",
      pool.second,
      ") is no memory pool; pass graph_pool_handle() or another graph's pool()");
  if (pool == c10::MempoolId_t{0, 0}) {
    return;
  }
  std::lock_guard<std::mutex> lock(pools_mutex);
  TORCH_CHECK(
      pools_capturing.insert(pool).second,
      "accel graph: another graph is capturing into the memory pool (",
      pool.first,
      ", ",
      pool.second,
      "); captures that share a pool must run one after the other");
  pool_ = pool;
}

void SharedPoolClaim::release() noexcept {
  if (pool_.has_value()) {
    std::lock_guard<std::mutex> lock(pools_mutex);
    pools_capturing.erase(*pool_);
    pool_.reset();
  }
}

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
