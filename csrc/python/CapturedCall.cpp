// One capture of a compiled graph as torch.compile(mode="reduce-overhead")
// replays it (torch_accel/_inductor/graphs.py): the static inputs it reads in
// place, the inputs it copies into its own buffers, and the outputs it hands
// out.
//
// A graph's outputs live in its own memory, which its next replay
// overwrites. Each replay therefore hands out new tensors over new storages
// of that memory, and when the graph replays again, the storages of the
// previous replay that are still referenced are invalidated: using them
// raises an error saying so (as Inductor's CUDA graph trees do). Outputs
// that are not the graph's memory (a static input's alias, a non-tensor
// value) are handed out as captured.
//
// Everything a replay does (copy inputs, invalidate, replay, hand out) is
// one call, with the plan worked out once at capture: the wrapper's per-call cost is what
// mode="reduce-overhead" exists to remove.

#include <csrc/python/CapturedCall.h>
#include <csrc/runtime/Graph.h>

#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/autograd/python_variable.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace torch_accel {

namespace py = pybind11;

namespace {

class CapturedCall {
public:
  // `static_inputs`: (input index, data pointer) of each input the graph
  // reads in place. `copies`: (buffer, input index) of each input copied
  // into the graph's buffer. `outputs`: the captured graph's outputs, in order. `graph_memory[k]`:
  // the index in `storages` of output k's storage if it is the graph's
  // memory (or an alias of a copied input), -1 if it is handed out as is.
  // `storages`: (data pointer, bytes, error message once overwritten).
  // `freed_message`: the error of outputs still referenced when the graph
  // is freed.
  CapturedCall(
      std::vector<std::pair<int64_t, uintptr_t>> static_inputs,
      std::vector<std::pair<at::Tensor, int64_t>> copies,
      std::vector<py::object> outputs,
      std::vector<int64_t> graph_memory,
      std::vector<std::tuple<uintptr_t, size_t, std::string>> storages,
      c10::Device device,
      std::string freed_message)
      : static_inputs_(std::move(static_inputs)), copies_(std::move(copies)), outputs_(std::move(outputs)),
        graph_memory_(std::move(graph_memory)), device_(device), freed_message_(std::move(freed_message)) {
    TORCH_CHECK(outputs_.size() == graph_memory_.size(), "accel graph outputs: one plan entry per output");
    for (auto& [data, nbytes, message] : storages) {
      storages_.push_back(Storage{reinterpret_cast<void*>(data), nbytes, std::move(message), {}});
    }
    for (size_t k = 0; k < outputs_.size(); ++k) {
      if (graph_memory_[k] >= 0) {
        TORCH_CHECK(static_cast<size_t>(graph_memory_[k]) < storages_.size(), "accel graph outputs: bad storage index");
        templates_.push_back(THPVariable_Unpack(outputs_[k].ptr()));
      } else {
        templates_.emplace_back();
      }
    }
  }

  CapturedCall(const CapturedCall&) = delete;
  CapturedCall& operator=(const CapturedCall&) = delete;

  ~CapturedCall() {
    // Outputs still referenced would read memory the graph no longer owns.
    invalidate(freed_message_);
  }

  // Whether the static inputs among `inputs` are where they were at capture.
  bool matches(const py::list& inputs) const {
    for (const auto& [index, data] : static_inputs_) {
      if (index >= static_cast<int64_t>(inputs.size())) {
        return false;
      }
      PyObject* input = PyList_GET_ITEM(inputs.ptr(), index);
      if (!THPVariable_Check(input) || reinterpret_cast<uintptr_t>(THPVariable_Unpack(input).data_ptr()) != data) {
        return false;
      }
    }
    return true;
  }

  // Whether a storage handed out by the last replay is still referenced.
  bool alive() const {
    for (const Storage& storage : storages_) {
      if (storage.handed_out.has_value() && !storage.handed_out->expired()) {
        return true;
      }
    }
    return false;
  }

  // Invalidates what the last replay handed out and is still referenced:
  // with `message`, or each storage's own message.
  void invalidate(const std::optional<std::string>& message) {
    for (Storage& storage : storages_) {
      if (!storage.handed_out.has_value()) {
        continue;
      }
      if (auto impl = storage.handed_out->lock()) {
        impl->release_data_and_set_meta_custom_data_ptr_error_msg_(message.value_or(storage.message));
      }
      storage.handed_out.reset();
    }
  }

  // Copies `inputs` into the graph's buffers, invalidates the last replay's
  // outputs, replays `graph`, and returns the new outputs. The GIL stays
  // held, as it does while the default compile's wrapper runs the same
  // kernels: the host calls of a host graph (Inductor's C++ kernels) take it
  // at each step otherwise.
  py::list replay(Graph& graph, const py::list& inputs) {
    {
      // The buffers are the graph's own: no autograd to record.
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      for (auto& [buffer, index] : copies_) {
        TORCH_CHECK(index < static_cast<int64_t>(inputs.size()), "accel graph replay: missing input ", index);
        buffer.copy_(THPVariable_Unpack(PyList_GET_ITEM(inputs.ptr(), index)));
      }
    }
    invalidate(std::nullopt);
    graph.replay();
    return handOut();
  }

private:
  struct Storage {
    void* data;
    size_t nbytes;
    std::string message;
    std::optional<c10::weak_intrusive_ptr<c10::StorageImpl>> handed_out;
  };

  py::list handOut() {
    std::vector<c10::intrusive_ptr<c10::StorageImpl>> storages;
    storages.reserve(storages_.size());
    for (Storage& storage : storages_) {
      // Not owning the memory: the graph does.
      auto impl = c10::make_storage_impl(
          c10::StorageImpl::use_byte_size_t(),
          static_cast<int64_t>(storage.nbytes),
          c10::DataPtr(storage.data, device_),
          /*allocator=*/nullptr,
          /*resizable=*/false,
          device_);
      storage.handed_out = c10::weak_intrusive_ptr<c10::StorageImpl>(impl);
      storages.push_back(std::move(impl));
    }
    py::list results(outputs_.size());
    for (size_t k = 0; k < outputs_.size(); ++k) {
      if (graph_memory_[k] < 0) {
        results[k] = outputs_[k];
        continue;
      }
      const at::Tensor& like = templates_[k];
      // The constructor adds autograd keys (unless in inference mode), as
      // for any new accel tensor.
      auto impl = c10::make_intrusive<c10::TensorImpl>(
          c10::Storage(storages[graph_memory_[k]]), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), like.dtype());
      impl->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
      impl->_set_conj(like.is_conj());
      impl->_set_neg(like.is_neg());
      results[k] = py::reinterpret_steal<py::object>(THPVariable_Wrap(at::Tensor(std::move(impl))));
    }
    return results;
  }

  std::vector<std::pair<int64_t, uintptr_t>> static_inputs_;
  std::vector<std::pair<at::Tensor, int64_t>> copies_;
  std::vector<py::object> outputs_;
  std::vector<int64_t> graph_memory_;
  std::vector<at::Tensor> templates_;
  std::vector<Storage> storages_;
  c10::Device device_;
  std::string freed_message_;
};

} // namespace

void initCapturedCallBindings(py::module& m) {
  py::class_<CapturedCall>(m, "_CapturedCall")
      .def(
          py::init<
              std::vector<std::pair<int64_t, uintptr_t>>,
              std::vector<std::pair<at::Tensor, int64_t>>,
              std::vector<py::object>,
              std::vector<int64_t>,
              std::vector<std::tuple<uintptr_t, size_t, std::string>>,
              c10::Device,
              std::string>(),
          py::arg("static_inputs"),
          py::arg("copies"),
          py::arg("outputs"),
          py::arg("graph_memory"),
          py::arg("storages"),
          py::arg("device"),
          py::arg("freed_message"))
      .def("matches", &CapturedCall::matches, py::arg("inputs"))
      .def("outputs_alive", &CapturedCall::alive)
      .def("invalidate_outputs", &CapturedCall::invalidate, py::arg("message") = std::nullopt)
      .def("replay", &CapturedCall::replay, py::arg("graph"), py::arg("inputs"));
}

} // namespace torch_accel
