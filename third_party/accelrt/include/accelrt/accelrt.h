/*
 * accelrt: an emulated accelerator "vendor runtime" whose device memory is ordinary host memory.
 *
 * The C API below is shaped like the CUDA runtime API (devices, memory, streams, events) so that a
 * PyTorch backend can drive it exactly as it drives CUDA.  It is usable from C and C++.
 *
 * Execution model
 * ---------------
 * Every operation enqueued on a stream (memcpy, host function, event record, ...) has completed when
 * the call that enqueued it returns, like CUDA with blocking launches.  Consequently:
 *   - streams are always idle: accelrtStreamQuery returns accelrtSuccess, synchronization is a no-op;
 *   - an event is complete as soon as it is recorded (and a never-recorded event counts as complete);
 *   - an event's timestamp is the time at which it was recorded (std::chrono::steady_clock, ns).
 * This is deliberate: the host kernels that use this memory run synchronously on the calling thread.
 *
 * Devices
 * -------
 * The number of devices is fixed at first use (see accelrtSetDeviceCount).  The current device is
 * per thread and defaults to 0.  Each device has a memory limit (default: the machine's physical
 * memory) and allocation statistics.
 *
 * Handles
 * -------
 * Stream and event handles are opaque values validated against a registry of live handles; a
 * destroyed or garbage handle yields accelrtErrorInvalidResourceHandle and never crashes.  Handle
 * values are never reused within a process.  The NULL stream is the default stream of the current
 * device.
 *
 * Errors
 * ------
 * Every function returns an accelrtError_t.  A NULL out-pointer is accelrtErrorInvalidValue.
 * Functions taking a device return accelrtErrorNoDevice when the device count is 0 and
 * accelrtErrorInvalidDevice when the ordinal is out of range.  All functions are thread-safe.
 */
#ifndef ACCELRT_ACCELRT_H_
#define ACCELRT_ACCELRT_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque handle types (forward declarations). */
typedef struct accelrtStream_st* accelrtStream_t;
typedef struct accelrtEvent_st* accelrtEvent_t;

/* ----------------------------------------------------------------------------------------------
 * Errors
 * -------------------------------------------------------------------------------------------- */

typedef enum accelrtError {
  accelrtSuccess = 0,                    /* the call succeeded */
  accelrtErrorInvalidValue = 1,          /* an argument is NULL, out of range or inconsistent */
  accelrtErrorMemoryAllocation = 2,      /* the allocation would exceed the limit or the host is out of memory */
  accelrtErrorInvalidDevice = 3,         /* the device ordinal is out of range */
  accelrtErrorNoDevice = 4,              /* the device count is 0 */
  accelrtErrorInvalidResourceHandle = 5, /* the stream/event handle is not live (destroyed, garbage, NULL) */
  accelrtErrorNotReady = 6,              /* the work is not complete, or an event was never recorded */
  accelrtErrorAlreadyInitialized = 7,    /* accelrtSetDeviceCount after the device count was fixed */
  accelrtErrorInjectedFault = 8          /* a stream, event or copy operation failed by fault injection */
} accelrtError_t;

/* Human-readable description, e.g. "invalid device ordinal"; never NULL, also for unknown codes. */
const char* accelrtGetErrorString(accelrtError_t error);
/* Enumerator name, e.g. "accelrtErrorInvalidDevice"; "unrecognized error code" for unknown codes. */
const char* accelrtGetErrorName(accelrtError_t error);

/* ----------------------------------------------------------------------------------------------
 * Devices
 *
 * The device count is fixed at first use: accelrtSetDeviceCount may be called before any other call
 * that touches devices (otherwise accelrtErrorAlreadyInitialized).  If it is never called, the count
 * is read from the environment variable ACCELRT_DEVICE_COUNT: a string of decimal digits only, with a
 * value in [0, 64]; a missing, empty or malformed (signs, spaces, other characters, > 64) value gives
 * 2.  Count 0 is legal: device-taking calls then return accelrtErrorNoDevice.
 * Calls that do NOT touch devices (and so do not fix the count): accelrtGetErrorString/Name,
 * accelrtFree, accelrtMallocHost, accelrtFreeHost, accelrtPointerGetAttributes, accelrtMemcpy,
 * accelrtMemset, accelrtDeviceGetStreamPriorityRange, and handle-taking calls given non-NULL handles.
 * -------------------------------------------------------------------------------------------- */

/* Fixes the device count; count in [0, 64] else InvalidValue; AlreadyInitialized once fixed. */
accelrtError_t accelrtSetDeviceCount(int count);
/* Writes the device count (fixing it if needed); never fails for a valid pointer. */
accelrtError_t accelrtGetDeviceCount(int* count);
/* Writes the calling thread's current device (default 0); NoDevice if the count is 0. */
accelrtError_t accelrtGetDevice(int* device);
/* Sets the calling thread's current device; InvalidDevice if out of range, NoDevice if count is 0. */
accelrtError_t accelrtSetDevice(int device);
/* Waits for all streams of the current device (immediate: they are always idle). */
accelrtError_t accelrtDeviceSynchronize(void);

typedef struct accelrtDeviceProp {
  char name[256];            /* "accelrt host device N" */
  size_t totalGlobalMem;     /* the device's current memory limit */
  int major, minor;          /* compute capability: 1.0 */
  int multiProcessorCount;   /* std::thread::hardware_concurrency() (at least 1) */
  int warpSize;              /* 1 */
  size_t maxThreadsPerBlock; /* 1 */
} accelrtDeviceProp;

/* Fills *prop with the properties of device. */
accelrtError_t accelrtGetDeviceProperties(accelrtDeviceProp* prop, int device);
/* Sets the device's memory limit (any time; a limit below current usage makes further allocations fail). */
accelrtError_t accelrtDeviceSetMemoryLimit(int device, size_t bytes);
/* For the current device: *free_bytes = max(limit - allocated, 0), *total_bytes = limit. */
accelrtError_t accelrtMemGetInfo(size_t* free_bytes, size_t* total_bytes);

/* ----------------------------------------------------------------------------------------------
 * Memory
 * -------------------------------------------------------------------------------------------- */

/* Allocates size bytes on the current device, 64-byte aligned; size 0 -> *ptr = NULL and success;
 * over the limit (or host OOM) -> accelrtErrorMemoryAllocation and *ptr = NULL. */
accelrtError_t accelrtMalloc(void** ptr, size_t size);
/* Frees a device allocation (its base pointer) from any current device; NULL ok; else InvalidValue. */
accelrtError_t accelrtFree(void* ptr);
/* Allocates "pinned" host memory (64-byte aligned, no limit, no device statistics); size 0 -> NULL. */
accelrtError_t accelrtMallocHost(void** ptr, size_t size);
/* Frees memory from accelrtMallocHost (its base pointer); NULL ok; any other pointer -> InvalidValue. */
accelrtError_t accelrtFreeHost(void* ptr);
/* Returns to the host allocator the memory that freed device allocations keep for reuse by later
 * accelrtMalloc calls of the same size; *released_bytes (NULL ok) gets how much. */
accelrtError_t accelrtMemTrimCache(size_t* released_bytes);

typedef enum accelrtMemoryType {
  accelrtMemoryTypeUnregistered = 0, /* not allocated by accelrt */
  accelrtMemoryTypeHost = 1,         /* accelrtMallocHost */
  accelrtMemoryTypeDevice = 2        /* accelrtMalloc */
} accelrtMemoryType;

typedef struct accelrtPointerAttributes {
  accelrtMemoryType type; /* kind of allocation containing the pointer */
  int device;             /* owning device; -1 for host and unregistered memory */
  void* basePointer;      /* start of the containing allocation; NULL if unregistered */
  size_t size;            /* size of the containing allocation; 0 if unregistered */
} accelrtPointerAttributes;

/* Describes the allocation containing ptr (base or interior pointer); untracked -> Unregistered, -1, success. */
accelrtError_t accelrtPointerGetAttributes(accelrtPointerAttributes* attributes, const void* ptr);

typedef struct accelrtMemoryStats {
  size_t allocatedBytes;     /* bytes currently allocated (as requested) */
  size_t peakAllocatedBytes; /* maximum of allocatedBytes since start or the last reset */
  size_t allocationCount;    /* number of live allocations */
} accelrtMemoryStats;

/* Writes the device's memory statistics. */
accelrtError_t accelrtDeviceGetMemoryStats(int device, accelrtMemoryStats* stats);
/* Resets the device's peak to its current allocated bytes. */
accelrtError_t accelrtDeviceResetPeakMemoryStats(int device);

typedef enum accelrtMemcpyKind {
  accelrtMemcpyHostToHost = 0,
  accelrtMemcpyHostToDevice = 1,
  accelrtMemcpyDeviceToHost = 2,
  accelrtMemcpyDeviceToDevice = 3,
  accelrtMemcpyDefault = 4 /* inferred: a pointer inside a live device allocation is device-side */
} accelrtMemcpyKind;

/* Copies count bytes (overlap-safe); device-side ranges must lie inside one live device allocation
 * (InvalidValue otherwise); host side only needs non-NULL; count 0 is a no-op; bad kind -> InvalidValue. */
accelrtError_t accelrtMemcpy(void* dst, const void* src, size_t count, accelrtMemcpyKind kind);
/* accelrtMemcpy enqueued on stream (validated; completes before returning). */
accelrtError_t
accelrtMemcpyAsync(void* dst, const void* src, size_t count, accelrtMemcpyKind kind, accelrtStream_t stream);
/* Sets count bytes of device memory to (unsigned char)value; range must lie in one device allocation. */
accelrtError_t accelrtMemset(void* dst, int value, size_t count);

/* ----------------------------------------------------------------------------------------------
 * Streams
 *
 * NULL (0) means the default stream of the current device.  Each stream belongs to the device that was
 * current when it was created.  Priorities: least = 0, greatest = -1 (lower number = higher priority);
 * a priority outside the range is clamped.
 * -------------------------------------------------------------------------------------------- */

/* Stream creation flags. */
#define accelrtStreamDefault 0x0u
#define accelrtStreamNonBlocking 0x1u

/* Creates a stream on the current device (flags 0, priority 0). */
accelrtError_t accelrtStreamCreate(accelrtStream_t* stream);
/* Creates a stream with flags (accelrtStream* bits, else InvalidValue) and a clamped priority. */
accelrtError_t accelrtStreamCreateWithPriority(accelrtStream_t* stream, unsigned int flags, int priority);
/* Destroys a stream; NULL (the default stream), unknown or destroyed handle -> InvalidResourceHandle. */
accelrtError_t accelrtStreamDestroy(accelrtStream_t stream);
/* Writes the stream's device (the current device for NULL). */
accelrtError_t accelrtStreamGetDevice(accelrtStream_t stream, int* device);
/* Writes the stream's (clamped) priority; 0 for the default stream. */
accelrtError_t accelrtStreamGetPriority(accelrtStream_t stream, int* priority);
/* Success when all work on the stream is done (always, here), else NotReady. */
accelrtError_t accelrtStreamQuery(accelrtStream_t stream);
/* Waits for all work on the stream (immediate). */
accelrtError_t accelrtStreamSynchronize(accelrtStream_t stream);
/* Makes future work on stream wait for event (immediate: the event is complete); flags must be 0. */
accelrtError_t accelrtStreamWaitEvent(accelrtStream_t stream, accelrtEvent_t event, unsigned int flags);
/* Writes the priority range: *leastPriority = 0, *greatestPriority = -1 (either pointer may be NULL). */
accelrtError_t accelrtDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority);

typedef void (*accelrtHostFn_t)(void* userData);
/* Runs fn(userData) on the calling thread before returning; NULL fn -> InvalidValue. */
accelrtError_t accelrtLaunchHostFunc(accelrtStream_t stream, accelrtHostFn_t fn, void* userData);

/* ----------------------------------------------------------------------------------------------
 * Events
 *
 * An event belongs to the device current at creation; recording it on a stream of another device
 * moves it to that stream's device (no error).  Recording stores the steady_clock time.
 * -------------------------------------------------------------------------------------------- */

/* Event creation flags. */
#define accelrtEventDefault 0x0u
#define accelrtEventBlockingSync 0x1u
#define accelrtEventDisableTiming 0x2u

/* Creates an event on the current device with accelrtEventDefault. */
accelrtError_t accelrtEventCreate(accelrtEvent_t* event);
/* Creates an event with flags (a combination of accelrtEvent* bits, else InvalidValue). */
accelrtError_t accelrtEventCreateWithFlags(accelrtEvent_t* event, unsigned int flags);
/* Destroys an event; NULL, unknown or destroyed handle -> InvalidResourceHandle. */
accelrtError_t accelrtEventDestroy(accelrtEvent_t event);
/* Writes the event's device: the device current at its creation, or of the stream it was last recorded on. */
accelrtError_t accelrtEventGetDevice(accelrtEvent_t event, int* device);
/* Records the event on stream (NULL = current device's default stream): timestamp = now. */
accelrtError_t accelrtEventRecord(accelrtEvent_t event, accelrtStream_t stream);
/* Success: recorded events are complete and a never-recorded event counts as complete (as CUDA). */
accelrtError_t accelrtEventQuery(accelrtEvent_t event);
/* Waits for the event (immediate). */
accelrtError_t accelrtEventSynchronize(accelrtEvent_t event);
/* *ms = (end.timestamp - start.timestamp) in milliseconds (may be negative).  Checks, in order:
 * ms NULL -> InvalidValue; either handle not live -> InvalidResourceHandle; either created with
 * accelrtEventDisableTiming -> InvalidResourceHandle; either never recorded -> NotReady.
 * (CUDA reports an unrecorded event as cudaErrorInvalidResourceHandle; here it is NotReady.) */
accelrtError_t accelrtEventElapsedTime(float* ms, accelrtEvent_t start, accelrtEvent_t end);

/* ----------------------------------------------------------------------------------------------
 * Fault injection
 *
 * For testing the error paths of accelrt's users: operations of an armed kind fail as if the device
 * had failed them.  A kind counts its operations from the moment it is armed (1, 2, ...); operation
 * number nth fails (0: none), and every operation fails with the given probability, drawn from a
 * generator seeded with seed, so that a (seed, operation number) pair always draws the same.  A failed
 * allocation returns accelrtErrorMemoryAllocation (and *ptr = NULL), any other failed operation
 * accelrtErrorInjectedFault; a failed operation has no effect.  Invalid arguments are reported as
 * such before any fault.  Nothing is armed initially; while nothing is, an operation pays one
 * predictable branch.
 *
 *   accelrtFaultAllocation   accelrtMalloc of size > 0 (not accelrtMallocHost, never a free)
 *   accelrtFaultStreamEvent  accelrtStreamCreate*, StreamQuery, StreamSynchronize, StreamWaitEvent,
 *                            LaunchHostFunc, DeviceSynchronize, EventCreate*, EventRecord, EventQuery,
 *                            EventSynchronize, EventElapsedTime (never a Destroy)
 *   accelrtFaultCopy         accelrtMemcpy, MemcpyAsync and Memset of count > 0, and
 *                            accelrtFaultCheck(accelrtFaultCopy)
 * -------------------------------------------------------------------------------------------- */

typedef enum accelrtFaultKind {
  accelrtFaultAllocation = 0,
  accelrtFaultStreamEvent = 1,
  accelrtFaultCopy = 2
} accelrtFaultKind;

/* Arms kind (nth 0 and probability 0 disarm it) and resets its counts; probability in [0, 1] (else
 * InvalidValue, as for an unknown kind). */
accelrtError_t
accelrtFaultInject(accelrtFaultKind kind, unsigned long long nth, double probability, unsigned long long seed);
/* Writes how many operations of kind were counted, and how many of them failed, since it was last
 * armed (either pointer may be NULL). */
accelrtError_t
accelrtFaultGetCounts(accelrtFaultKind kind, unsigned long long* operations, unsigned long long* injected);
/* Counts one operation of kind that the caller performs itself (a copy that its own host kernels
 * make of device memory) and returns the error injected for it, or accelrtSuccess. */
accelrtError_t accelrtFaultCheck(accelrtFaultKind kind);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ACCELRT_ACCELRT_H_ */
