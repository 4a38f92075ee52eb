// accel's rows in Kineto traces: a Kineto child profiler ("plugin").
//
// torch.profiler.profile(activities=[..., ProfilerActivity.PrivateUse1]) (and
// torch.autograd.profiler.profile(use_device="accel", use_kineto=True)) hand
// the trace to Kineto, asking for device kernels (CONCURRENT_KERNEL activities)
// and never calling ProfilerStubs. Kineto records CUDA kernels itself (CUPTI);
// PyTorch labels device activities as PrivateUse1 once a PrivateUse1 backend
// is registered. So:
//
//   - where Kineto sees accel's kernels itself (the CUDA runtime: they are CUDA
//     kernels), this profiler adds nothing: CUPTI's kernels of cuda:N are on
//     the trace's process N, which Kineto names (GPU N) and accel:N is. Naming
//     that process accel:N as well would give one pid two names;
//   - elsewhere (the host runtime) it supplies the kernels: the target
//     kernels torch_accel ran, recorded by RecordDeviceActivity, each linked to
//     the operator that ran it, with the accel device as process (named
//     accel:N) and the accel stream as thread.
//
// PyTorch then attributes each kernel's time to its operator ("Self ACCEL" /
// "ACCEL total" in key_averages()). Registered with Kineto when
// torch_accel._C loads; built only when PyTorch ships Kineto's headers (it
// does when it has Kineto).

#if __has_include(<kineto/libkineto.h>)

// Kineto's activities format their metadata with fmt, which PyTorch builds in
// without exporting it: compile the little this file uses into it.
#define FMT_HEADER_ONLY

#include <csrc/core/AccelDevice.h>
#include <csrc/profiler/DeviceActivity.h>
#include <csrc/runtime/Runtime.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

// Kineto's headers expect its build to name its namespace.
#ifndef KINETO_NAMESPACE
#define KINETO_NAMESPACE libkineto
#endif
#include <kineto/libkineto.h>
#include <kineto/output_base.h>

#include <exception>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace torch_accel {
namespace {

using libkineto::ActivityType;

c10::DeviceIndex accelDeviceCount() {
  return c10::impl::getDeviceGuardImpl(kAccel)->deviceCount();
}

// The span our activities name: it must outlive the trace, which copies them.
const libkineto::TraceSpan& accelSpan() {
  static const libkineto::TraceSpan span(0, 0, "accel");
  return span;
}

// Kernel correlation ids, kept clear of PyTorch's operator ids (counted up
// from 1) in case a Kineto version files them in the same map.
constexpr int32_t kFirstKernelId = 1 << 30;

class AccelProfilerSession final : public libkineto::IActivityProfilerSession {
public:
  ~AccelProfilerSession() override {
    if (recording_generation_ != 0) {
      DeviceActivityRecorder::instance().stop(recording_generation_);
    }
  }

  void start() override {
    recording_generation_ = DeviceActivityRecorder::instance().start();
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    if (recording_generation_ != 0) {
      DeviceActivityRecorder::instance().stop(recording_generation_);
    }
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override {
    return errors_;
  }

  void pushCorrelationId(uint64_t id) override {
    DeviceActivityRecorder::instance().pushCorrelationId(id);
  }

  void popCorrelationId() override {
    DeviceActivityRecorder::instance().popCorrelationId();
  }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, 0, 0);
  }

  void processTrace(
      libkineto::ActivityLogger& logger,
      libkineto::getLinkedActivityCallback linked_activity,
      int64_t start_time,
      int64_t /*end_time*/) override {
    // Device (process) -> streams (threads) that ran kernels.
    std::map<c10::DeviceIndex, std::set<int32_t>> rows;
    int32_t next_id = kFirstKernelId;
    for (const auto& record : DeviceActivityRecorder::instance().take()) {
      double milliseconds = 0;
      try {
        milliseconds = record.start->elapsedMs(*record.end);
      } catch (const std::exception& e) {
        errors_.emplace_back(e.what());
        continue;
      }
      libkineto::GenericTraceActivity kernel(accelSpan(), ActivityType::CONCURRENT_KERNEL, record.name);
      kernel.startTime = record.start_ns;
      kernel.endTime = record.start_ns + static_cast<int64_t>(milliseconds * 1e6);
      kernel.id = next_id++;
      kernel.device = record.start->device();
      kernel.resource = static_cast<int32_t>(record.start->stream().id());
      if (linked_activity && record.correlation_id != 0) {
        kernel.linked = linked_activity(static_cast<int32_t>(record.correlation_id));
      }
      kernel.addMetadata("device", kernel.device);
      kernel.addMetadata("stream", kernel.resource);
      kernel.addMetadata("correlation", kernel.id);
      // log() hands Kineto's logger a copy, which the trace owns.
      kernel.log(logger);
      rows[record.start->device()].insert(kernel.resource);
    }
    for (const auto& [device, streams] : rows) {
      const std::string name = "accel:" + std::to_string(device);
      logger.handleDeviceInfo(
          libkineto::DeviceInfo(device, libkineto::kExceedMaxPid + device, name, name),
          static_cast<uint64_t>(start_time));
      for (const int32_t stream : streams) {
        logger.handleResourceInfo(
            libkineto::ResourceInfo(device, stream, stream, "stream " + std::to_string(stream)), start_time);
      }
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return nullptr; // processTrace names every accel device it saw
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    return {};
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return nullptr;
  }

private:
  uint64_t recording_generation_ = 0;
  std::vector<std::string> errors_;
};

class AccelActivityProfiler final : public libkineto::IActivityProfiler {
public:
  const std::string& name() const override {
    static const std::string name = "accel";
    return name;
  }

  const std::set<ActivityType>& availableActivities() const override {
    static const std::set<ActivityType> activities{ActivityType::CONCURRENT_KERNEL};
    return activities;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession>
  configure(const std::set<ActivityType>& activity_types, const libkineto::Config& /*config*/) override {
    // A trace that asks for no device kernels (CPU-only, or accel profiled
    // through ProfilerStubs instead) gets no session, and neither does a
    // process without accel devices, nor one whose kernels Kineto records
    // itself (see the top of this file).
    if (activity_types.count(ActivityType::CONCURRENT_KERNEL) == 0 || accelDeviceCount() == 0 ||
        runtime().kinetoTracesTargetKernels()) {
      return nullptr;
    }
    return std::make_unique<AccelProfilerSession>();
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*ts_ms*/,
      int64_t /*duration_ms*/,
      const std::set<ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }
};

// Registered when torch_accel._C loads; Kineto creates it when it initialises
// (or at once, if a trace already initialised it).
const bool registered = [] {
  libkineto::api().registerProfilerFactory([] { return std::make_unique<AccelActivityProfiler>(); });
  return true;
}();

} // namespace
} // namespace torch_accel

#endif // __has_include(<kineto/libkineto.h>)
