r"""The callbacks that PyTorch's GPU trace calls for accel, as torch.cuda._gpu_trace's for cuda.

Once ``torch._C._activate_gpu_trace()`` has run, accel's guard, interprocess
events and (on the host runtime) its allocator report each event creation,
record, wait, synchronisation and deletion, each stream creation and
synchronisation, each device synchronisation and each allocation and free of
accel memory (csrc/runtime/AccelTrace.h); PyTorch looks this module up as
``torch.accel._gpu_trace`` and fires the registry of the report's kind. The
stream sanitizer (``torch.accel._sanitizer``, docs/stream-sanitizer.md)
adds its callbacks to them (``add_callback``). Streams are reported by the id
``torch_accel._C._trace_stream_id`` gives them, events by their runtime
handle, memory by its address.
"""

from torch._utils import CallbackRegistry

# The names are the ones PyTorch fires (torch/csrc/PyInterpreter.cpp looks
# them up by name on the device module's _gpu_trace).
EventCreationCallbacks: "CallbackRegistry[int]" = CallbackRegistry("accel event creation")
EventDeletionCallbacks: "CallbackRegistry[int]" = CallbackRegistry("accel event deletion")
EventRecordCallbacks: "CallbackRegistry[int, int]" = CallbackRegistry("accel event record")
EventWaitCallbacks: "CallbackRegistry[int, int]" = CallbackRegistry("accel event wait")
MemoryAllocationCallbacks: "CallbackRegistry[int]" = CallbackRegistry("accel memory allocation")
MemoryDeallocationCallbacks: "CallbackRegistry[int]" = CallbackRegistry("accel memory deallocation")
StreamCreationCallbacks: "CallbackRegistry[int]" = CallbackRegistry("accel stream creation")
DeviceSynchronizationCallbacks: "CallbackRegistry[[]]" = CallbackRegistry("accel device synchronization")
StreamSynchronizationCallbacks: "CallbackRegistry[int]" = CallbackRegistry("accel stream synchronization")
EventSynchronizationCallbacks: "CallbackRegistry[int]" = CallbackRegistry("accel event synchronization")

