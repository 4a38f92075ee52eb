// accel_aoti_run: runs an AOTInductor package compiled for accel on accel:0,
// in a process without Python.
//
//   accel_aoti_run PACKAGE INPUTS OUTPUTS
//
// PACKAGE  a .pt2 that torch._inductor.aoti_compile_and_package made of a
//          model exported on accel
// INPUTS   the model's inputs, flattened: a list (or tuple) of tensors, or one
//          tensor, saved with torch.save; they are copied to accel:0
// OUTPUTS  where its outputs go, copied to the CPU: a tuple of tensors that
//          torch.load reads
//
// The program links accel's core (torch_accel/lib/libtorch_accel.so), whose loading
// registers accel with PyTorch: the device name, the device guard, allocator
// and operators, and accel's AOTInductor model runner. PyTorch's package
// loader reads the package's device, accel, and creates that runner. Built by
// `make example-aoti`; see docs/compile.md, "A C++ program without Python".
#include <torch_accel/accel.h>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace {

std::vector<char> readFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  TORCH_CHECK(file, "cannot open ", path);
  return std::vector<char>(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

void writeFile(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream file(path, std::ios::binary);
  TORCH_CHECK(file, "cannot create ", path);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  TORCH_CHECK(file.good(), "cannot write ", path);
}

// The tensors of what torch.save wrote: one tensor, or a list or tuple of them.
std::vector<at::Tensor> loadTensors(const std::string& path) {
  const c10::IValue value = torch::jit::pickle_load(readFile(path));
  if (value.isTensor()) {
    return {value.toTensor()};
  }
  std::vector<c10::IValue> elements;
  if (value.isTensorList()) {
    for (const at::Tensor& tensor : value.toTensorList()) {
      elements.emplace_back(tensor);
    }
  } else if (value.isList()) {
    elements = value.toListRef().vec();
  } else if (value.isTuple()) {
    elements = value.toTupleRef().elements().vec();
  } else {
    TORCH_CHECK(false, path, " holds a ", value.tagKind(), ", not a tensor or a list or tuple of tensors");
  }
  std::vector<at::Tensor> tensors;
  for (const c10::IValue& element : elements) {
    TORCH_CHECK(element.isTensor(), path, " holds a ", element.tagKind(), " where a tensor was expected");
    tensors.push_back(element.toTensor());
  }
  return tensors;
}

int run(const std::string& package, const std::string& inputs_path, const std::string& outputs_path) {
  // What torch.accel does on its first call in Python.
  torch_accel::init();
  c10::InferenceMode inference;

  const c10::Device accel("accel:0");
  std::vector<at::Tensor> inputs;
  for (const at::Tensor& input : loadTensors(inputs_path)) {
    inputs.push_back(input.to(accel));
  }

  // The loader creates the runner the package's device names ("accel").
  torch::inductor::AOTIModelPackageLoader loader(package);
  const std::vector<at::Tensor> outputs = loader.run(inputs);

  // A tuple: torch.load's weights-only unpickler reads it (a typed list of
  // tensors would pickle as a TorchScript type it refuses).
  std::vector<c10::IValue> on_cpu;
  for (const at::Tensor& output : outputs) {
    TORCH_CHECK(output.device() == accel, "the model returned a tensor on ", output.device(), ", not on ", accel);
    on_cpu.emplace_back(output.cpu());
  }
  writeFile(outputs_path, torch::jit::pickle_save(c10::ivalue::Tuple::create(std::move(on_cpu))));
  return EXIT_SUCCESS;
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: " << argv[0] << " PACKAGE INPUTS OUTPUTS\n";
    return 2;
  }
  try {
    return run(argv[1], argv[2], argv[3]);
  } catch (const c10::Error& error) {
    std::cerr << argv[0] << ": " << error.what_without_backtrace() << "\n";
  } catch (const std::exception& error) {
    std::cerr << argv[0] << ": " << error.what() << "\n";
  }
  return EXIT_FAILURE;
}
