#pragma once

namespace torch_accel {

// The number of GPUs CUDA will expose, counted through NVML so that nothing
// initialises the CUDA driver: a process that only asks how many accel devices
// there are can still fork children that use accel (torch.cuda.device_count
// makes the same promise). Returns -1 when NVML is missing or fails, or when
// CUDA_VISIBLE_DEVICES names devices in a form this count does not parse
// (UUIDs, MIG instances); callers then ask the CUDA runtime itself.
int nvmlVisibleDeviceCount() noexcept;

} // namespace torch_accel
