#pragma once

// Which GPUs CUDA_VISIBLE_DEVICES names, read as torch.cuda reads it
// (torch/cuda/__init__.py: _parse_visible_devices and
// _transform_uuid_to_ordinals), so that accel counts, without initialising
// CUDA, exactly the devices torch.cuda counts. Only parsing lives here; NVML,
// which knows the machine's GPUs, is asked in NvmlDeviceCount.cpp.

#include <cstdint>
#include <string>
#include <vector>

namespace torch_accel {

struct CudaVisibleDevices {
  enum class Kind {
    Ordinals, // integer ordinals (also when the variable is unset: 0 to 63, as torch.cuda)
    GpuUuids, // "GPU-..." UUIDs or unique prefixes of them
    MigUuids, // "MIG-..." instances
  };
  Kind kind = Kind::Ordinals;
  // Kind::Ordinals: the ordinals, in order, all non-negative.
  std::vector<int64_t> ordinals;
  // Kind::GpuUuids, Kind::MigUuids: the entries as written, prefix included.
  std::vector<std::string> uuids;

  // The list names no device (an empty, repeated or invalid first entry).
  bool empty() const {
    return ordinals.empty() && uuids.empty();
  }
};

// Parses a value of CUDA_VISIBLE_DEVICES (nullptr: unset). As torch.cuda:
//   - a list starting with "GPU-" or "MIG-" is a list of UUIDs of that kind,
//     up to the first entry without that prefix;
//   - any other list is a list of ordinals, each read like strtoul (leading
//     and trailing whitespace ignored, an optional sign, the leading digits:
//     "1gpu2" is 1), up to the first entry that is negative or has no digits;
//   - a repeated entry makes the whole list empty: no device is visible.
CudaVisibleDevices parseCudaVisibleDevices(const char* value);

// The ordinals (indices into `uuids`, the full UUIDs of the machine's GPUs in
// NVML's order) of `candidates`, UUIDs or their prefixes. As torch.cuda: the
// list stops at the first candidate that is the prefix of no UUID or of
// several (ambiguous), and two candidates naming the same GPU make it empty.
std::vector<int64_t>
cudaUuidsToOrdinals(const std::vector<std::string>& candidates, const std::vector<std::string>& uuids);

// How many of `ordinals` CUDA exposes on a machine with `physical` GPUs: those
// before the first one that does not exist.
int64_t cudaVisibleOrdinalCount(const std::vector<int64_t>& ordinals, int64_t physical);

} // namespace torch_accel
