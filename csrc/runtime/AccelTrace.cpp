#include <csrc/runtime/AccelTrace.h>

namespace torch_accel::trace {

std::atomic<ReportRunner> report_runner{nullptr};

} // namespace torch_accel::trace
