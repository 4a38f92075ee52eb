// accel memory that other processes can map, on the CUDA runtime: the
// mechanism torch.multiprocessing uses for cuda storages (_share_cuda_,
// _new_shared_cuda), for accel's, which are the caching allocator's memory
// labelled accel.
//
// Sender: the caching allocator's IPC handle of the block holding the storage
// and the storage's offset in it. The storage's DataPtr goes behind torch's
// reference-counted sent data (torch::GetNewRefCountedSentData): one slot of
// a shared counter file per message, which the receiver decrements when it
// releases the memory; until then the sender keeps the block (in torch's
// limbo if the sender frees the storage first). torch's sent data records an
// interprocess event on the sender's current stream (accel's current stream
// is CUDA's), which the receiver's current stream waits for: the receiver
// never reads the memory before the work that produced it.
//
// Receiver: maps the block (the caching allocator maps a block once per
// process and caches it), waits for the event, and wraps its part of the
// block in a DataPtr labelled accel whose deleter waits for this process'
// work on it and decrements the sender's counter. A receiver may send the
// storage on (to a third process, or back): the message names the same block,
// and the receiver's own count keeps its mapping, hence the first sender's
// count, until that receiver releases it.
//
// Compiled on every machine with a CUDA torch; it runs only on a GPU.

#include <csrc/core/AccelDevice.h>
#include <csrc/runtime/cuda/CudaSharedMemory.h>

#include <ATen/MapAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

// torch's CUDA IPC reference counting; the header declares it only for builds
// with CUDA (USE_CUDA), which every build of this file is.
#ifndef USE_CUDA
#define USE_CUDA
#endif
#include <torch/csrc/CudaIPCTypes.h>

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>

namespace torch_accel {
namespace {

// Identifies this process in the handles it sends, so that a handle coming
// back is recognised (a process cannot open its own CUDA IPC handles).
uint64_t processToken() {
  static const uint64_t token = [] {
    std::random_device random;
    return (static_cast<uint64_t>(random()) << 32) ^ random();
  }();
  return token;
}

// The runtime's handle bytes: fields in a fixed order, strings length-prefixed.
class HandleWriter {
public:
  void field(const std::string& bytes) {
    integer(bytes.size());
    out_ += bytes;
  }
  void integer(uint64_t value) {
    out_.append(reinterpret_cast<const char*>(&value), sizeof(value));
  }
  std::string str() && {
    return std::move(out_);
  }

private:
  std::string out_;
};

class HandleReader {
public:
  explicit HandleReader(const std::string& bytes) : bytes_(bytes) {}
  uint64_t integer() {
    check(sizeof(uint64_t));
    uint64_t value = 0;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(value));
    pos_ += sizeof(value);
    return value;
  }
  std::string field() {
    const uint64_t size = integer();
    check(size);
    std::string value = bytes_.substr(pos_, size);
    pos_ += size;
    return value;
  }
  void end() const {
    TORCH_CHECK_VALUE(pos_ == bytes_.size(), "accel (CUDA runtime): malformed shared storage handle");
  }

private:
  void check(uint64_t size) const {
    TORCH_CHECK_VALUE(size <= bytes_.size() - pos_, "accel (CUDA runtime): malformed shared storage handle");
  }

  const std::string& bytes_;
  size_t pos_ = 0;
};

// Where a storage lives: a caching-allocator block and the storage's offset.
struct BlockPart {
  std::string block;
  uint64_t offset = 0;
};

// One message: a storage's memory, the sender's counter slot for it, and the
// event that orders the receiver after the sender's work (empty where torch
// synchronised the device instead, having too many events in flight).
struct Message {
  uint64_t sender = 0;
  BlockPart memory;
  std::string counter_file;
  uint64_t counter_slot = 0;
  std::string event;
};

std::string encode(const Message& message) {
  HandleWriter writer;
  writer.integer(message.sender);
  writer.field(message.memory.block);
  writer.integer(message.memory.offset);
  writer.field(message.counter_file);
  writer.integer(message.counter_slot);
  writer.field(message.event);
  return std::move(writer).str();
}

Message decode(const SharedStorageHandle& handle) {
  HandleReader reader(handle.handle);
  Message message;
  message.sender = reader.integer();
  message.memory.block = reader.field();
  message.memory.offset = reader.integer();
  message.counter_file = reader.field();
  message.counter_slot = reader.integer();
  message.event = reader.field();
  reader.end();
  TORCH_CHECK_VALUE(
      message.event.empty() || message.event.size() == sizeof(cudaIpcEventHandle_t),
      "accel (CUDA runtime): malformed shared storage handle");
  return message;
}

// The same bytes for every message about one storage: receivers map it once.
std::string cacheKey(const BlockPart& memory) {
  HandleWriter writer;
  writer.field(memory.block);
  writer.integer(memory.offset);
  return std::move(writer).str();
}

// Tells the sender that this process no longer uses the memory of one
// message. Best effort, as torch's: a sender that has exited has no counter
// file left, and then there is nothing to release.
void decrementSenderCounter(const Message& message) noexcept {
  try {
    c10::DataPtr counters = at::RefcountedMapAllocator::makeDataPtr(
        message.counter_file.c_str(),
        at::ALLOCATOR_MAPPED_SHAREDMEM | at::ALLOCATOR_MAPPED_NOCREATE,
        sizeof(int64_t) * torch::CUDA_IPC_REF_COUNTER_FILE_SIZE,
        nullptr);
    *(static_cast<int64_t*>(counters.get()) + message.counter_slot) -= 1;
  } catch (const c10::Error&) {
  }
}

// Orders the current stream of `device` after the sender's work.
void waitForSender(const Message& message, c10::DeviceIndex device) {
  if (message.event.empty()) {
    return; // torch synchronised the sender's device before sending
  }
  cudaIpcEventHandle_t event_handle;
  std::memcpy(&event_handle, message.event.data(), sizeof(event_handle));
  cudaEvent_t event = nullptr;
  C10_CUDA_CHECK(cudaIpcOpenEventHandle(&event, event_handle));
  const cudaError_t waited = cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(device), event, 0);
  // The wait is queued: the event may go (CUDA frees it once it has no use).
  C10_CUDA_CHECK_WARN(cudaEventDestroy(event));
  C10_CUDA_CHECK(waited);
}

// What a receiver's DataPtr holds: the mapping of the block, which memory of
// it this storage is (to send it on), and the sender's counter slot.
struct ReceivedMemory {
  std::shared_ptr<void> mapping;
  Message message;
  c10::DeviceIndex device = 0;
};

void releaseReceivedMemory(void* context) {
  std::unique_ptr<ReceivedMemory> received(static_cast<ReceivedMemory*>(context));
  // The sender may reuse the block once its counter drops: this process'
  // work on it must be done first (torch waits the same way). Deleters must
  // not throw.
  try {
    c10::cuda::stream_synchronize(c10::cuda::getCurrentCUDAStream(received->device));
  } catch (...) {
  }
  received->mapping.reset();
  decrementSenderCounter(received->message);
}

// The deleter of torch's sent data (not exported by torch: learnt from the
// first DataPtr it makes), to find what a storage shared before wraps.
std::atomic<c10::DeleterFnPtr> sent_data_deleter{nullptr};

// The memory this process received from another that `ptr` is, through the
// sent data wrapped around it each time it was sent on; null for memory of
// this process' own.
const ReceivedMemory* receivedMemory(const c10::DataPtr& ptr) {
  const c10::DataPtr* current = &ptr;
  while (true) {
    if (current->get_deleter() == &releaseReceivedMemory) {
      return static_cast<const ReceivedMemory*>(current->get_context());
    }
    const c10::DeleterFnPtr sent = sent_data_deleter.load(std::memory_order_acquire);
    if (sent == nullptr || current->get_deleter() != sent) {
      return nullptr;
    }
    current = &static_cast<torch::CudaIPCSentData*>(current->get_context())->original_ptr_;
  }
}

} // namespace

SharedStorageHandle shareCudaStorage(c10::StorageImpl& storage) {
  const c10::DeviceIndex device = storage.device().index();
  c10::cuda::CUDAGuard guard(device);
  void* data = storage.mutable_data();
  Message message;
  message.sender = processToken();
  if (const ReceivedMemory* received = receivedMemory(storage.data_ptr())) {
    // Memory another process sent here: the same block, found by its handle.
    message.memory.block = received->message.memory.block;
    message.memory.offset =
        static_cast<uint64_t>(static_cast<char*>(data) - static_cast<char*>(received->mapping.get()));
  } else {
    const c10::cuda::CUDACachingAllocator::ShareableHandle block =
        c10::cuda::CUDACachingAllocator::shareIpcHandle(data);
    message.memory.block = block.handle;
    message.memory.offset = static_cast<uint64_t>(block.offset);
  }
  // Puts the storage's memory behind a new counter slot for this message.
  // torch's sent data takes CUDA's device (it records its event on that
  // device's current stream), then the DataPtr is relabelled accel.
  c10::DataPtr sent = torch::GetNewRefCountedSentData(data, c10::Device(c10::DeviceType::CUDA, device));
  sent_data_deleter.store(sent.get_deleter(), std::memory_order_release);
  sent.unsafe_set_device(storage.device());
  c10::DataPtr original = storage.set_data_ptr(std::move(sent));
  auto* sent_data = static_cast<torch::CudaIPCSentData*>(storage.data_ptr().get_context());
  sent_data->set_original_ptr(std::move(original));
  message.counter_file = sent_data->handle();
  message.counter_slot = sent_data->offset();
  if (sent_data->event_sync_required_) {
    cudaIpcEventHandle_t event_handle;
    C10_CUDA_CHECK(cudaIpcGetEventHandle(&event_handle, sent_data->event_));
    message.event.assign(reinterpret_cast<const char*>(&event_handle), sizeof(event_handle));
  }
  SharedStorageHandle handle;
  handle.handle = encode(message);
  handle.nbytes = storage.nbytes();
  handle.key = cacheKey(message.memory);
  return handle;
}

c10::DataPtr openCudaSharedStorage(const SharedStorageHandle& handle, c10::DeviceIndex device) {
  Message message = decode(handle);
  if (message.sender == processToken()) {
    // Its own storage comes back to a process as that storage (the caller's
    // cache); one no longer alive here cannot be mapped again.
    decrementSenderCounter(message);
    TORCH_CHECK(
        false,
        "accel (CUDA runtime): an accel tensor sent by this process came back after its storage was freed here; "
        "CUDA cannot map a process' own memory through IPC");
  }
  c10::cuda::CUDAGuard guard(device);
  auto received = std::make_unique<ReceivedMemory>();
  try {
    waitForSender(message, device);
    received->mapping = c10::cuda::CUDACachingAllocator::getIpcDevPtr(message.memory.block);
  } catch (...) {
    // Nothing here uses the memory: the sender may release it.
    decrementSenderCounter(message);
    throw;
  }
  received->device = device;
  void* data = static_cast<char*>(received->mapping.get()) + message.memory.offset;
  received->message = std::move(message);
  return c10::DataPtr(data, received.release(), &releaseReceivedMemory, c10::Device(kAccel, device));
}

void collectCudaSharedMemory() {
  // A storage freed here while receivers still held its memory went to
  // torch's limbo of sent data (shareCudaStorage puts every sent storage
  // behind torch's sent data). torch frees the blocks there whose counter
  // slots all receivers released, and the counter files with no slot in use:
  // torch.cuda.ipc_collect's work, which covers accel's sent memory too.
  torch::CudaIPCCollect();
}

void reuseCudaSharedStorage(const SharedStorageHandle& handle, c10::DeviceIndex device) {
  const Message message = decode(handle);
  if (message.sender != processToken()) {
    c10::cuda::CUDAGuard guard(device);
    try {
      waitForSender(message, device);
    } catch (...) {
      decrementSenderCounter(message);
      throw;
    }
  }
  decrementSenderCounter(message);
}

} // namespace torch_accel
