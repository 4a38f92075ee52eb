#include <csrc/python/TargetViews.h>

#include <csrc/aten/TargetTensor.h>
#include <csrc/core/AccelDevice.h>

#include <c10/core/TensorImpl.h>
#include <c10/core/impl/SizesAndStrides.h>
#include <torch/csrc/autograd/python_variable.h>

#include <string>
#include <vector>

namespace torch_accel {
namespace {

namespace py = pybind11;

// Every property of a target view that a target kernel can observe through
// TensorImpl's and StorageImpl's API (and the inline sizes and strides past
// dim(), which ATen reads in places), as Python values.
py::dict describe(const at::Tensor& view) {
  c10::TensorImpl* impl = view.unsafeGetTensorImpl();
  py::dict state;
  state["sizes"] = impl->sizes().vec();
  state["strides"] = impl->strides().vec();
  state["storage_offset"] = impl->storage_offset();
  state["numel"] = impl->numel();
  std::vector<int64_t> inline_sizes;
  std::vector<int64_t> inline_strides;
  if (impl->dim() <= C10_SIZES_AND_STRIDES_MAX_INLINE_SIZE) {
    const c10::impl::SizesAndStrides& sizes_and_strides = impl->sizes_and_strides();
    for (size_t i = 0; i < C10_SIZES_AND_STRIDES_MAX_INLINE_SIZE; ++i) {
      inline_sizes.push_back(sizes_and_strides.size_at_unchecked(i));
      inline_strides.push_back(sizes_and_strides.stride_at_unchecked(i));
    }
  }
  state["inline_sizes"] = inline_sizes;
  state["inline_strides"] = inline_strides;
  for (const auto format :
       {at::MemoryFormat::Contiguous, at::MemoryFormat::ChannelsLast, at::MemoryFormat::ChannelsLast3d}) {
    state[py::str("is_contiguous_" + c10::toString(format))] = impl->is_contiguous(format);
    state[py::str("is_strides_like_" + c10::toString(format))] = impl->is_strides_like(format);
  }
  state["is_non_overlapping_and_dense"] = impl->is_non_overlapping_and_dense();
  state["keys"] = c10::toString(impl->key_set());
  state["dtype"] = std::string(impl->dtype().name());
  state["device"] = impl->device().str();
  state["layout"] = c10::toString(impl->layout());
  state["is_inference"] = impl->is_inference();
  state["version_enabled"] = impl->version_counter().enabled();
  state["version"] = impl->version_counter().enabled() ? impl->version_counter().current_version() : 0;
  state["unique_version"] = impl->unique_version();
  bool storage_access_throws = false;
  try {
    (void)impl->storage();
  } catch (const c10::Error&) {
    storage_access_throws = true;
  }
  state["storage_access_throws"] = storage_access_throws;
  state["is_wrapped_number"] = impl->is_wrapped_number();
  state["allow_tensor_metadata_change"] = impl->allow_tensor_metadata_change();
  state["has_named_tensor_meta"] = impl->has_named_tensor_meta();
  state["has_backend_meta"] = impl->get_backend_meta() != nullptr;
  state["has_autograd_meta"] = impl->autograd_meta() != nullptr;
  state["has_pyobj"] = impl->pyobj_slot()->load_pyobj() != nullptr;
  state["has_symbolic_sizes_strides"] = impl->has_symbolic_sizes_strides();
  state["is_python_dispatch"] = impl->is_python_dispatch();
  state["use_count"] = view.use_count();
  state["weak_use_count"] = view.weak_use_count();
  c10::StorageImpl* storage = impl->unsafe_storage().unsafeGetStorageImpl();
  state["storage_nbytes"] = storage->nbytes();
  state["storage_data"] = reinterpret_cast<uintptr_t>(storage->data());
  state["storage_device"] = storage->device().str();
  state["storage_resizable"] = storage->resizable();
  state["storage_allocator"] = reinterpret_cast<uintptr_t>(storage->allocator());
  state["storage_owns_memory"] = storage->data_ptr().get_deleter() != &c10::detail::deleteNothing;
  state["storage_received_cuda"] = storage->received_cuda();
  state["storage_has_pyobj"] = storage->pyobj_slot()->load_pyobj() != nullptr;
  // (Counted with a reference of this function's own, left out.)
  const auto owner = c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(storage);
  state["storage_use_count"] = owner.use_count() - 1;
  state["storage_weak_use_count"] = owner.weak_use_count();
  return state;
}

} // namespace

void initTargetViewBindings(py::module& m) {
  // (whether a recycled TensorImpl stood for `tensor`, its state); with
  // `recycled=False`, or when none waits on this thread, a new TensorImpl's.
  m.def("_target_view_state", [](const at::Tensor& tensor, bool recycled) {
    TORCH_CHECK(tensor.device().type() == kAccel, "expected an accel tensor");
    const bool from_recycled = recycled && hasRecycledTarget();
    at::Tensor view = recycled ? toResizableTarget(tensor) : toNewResizableTarget(tensor);
    py::dict state = describe(view);
    recycleTarget(std::move(view));
    return py::make_tuple(from_recycled, state);
  });
}

} // namespace torch_accel
