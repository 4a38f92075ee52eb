#pragma once

namespace torch_accel {

// The number of GPUs CUDA will expose, counted through NVML so that nothing
// initialises the CUDA driver: a process that only asks how many accel devices
// there are can still fork children that use accel (torch.cuda.device_count
// makes the same promise, and this count is torch.cuda's _device_count_nvml).
// CUDA_VISIBLE_DEVICES is read on every call, as CUDA reads it when it
// initialises (CudaVisibleDevices.h): ordinals, GPU UUIDs and their unique
// prefixes (mapped to ordinals through NVML's UUIDs), repeated and invalid
// entries. Returns -1 when NVML is missing or fails, and for MIG instances
// (as torch.cuda, which does not map them): callers then ask CUDA itself.
int nvmlVisibleDeviceCount() noexcept;

} // namespace torch_accel
