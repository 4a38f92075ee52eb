"""The Hugging Face stack under accel's CUDA-program opt-in, for test_transfer_to_accel.py.

    python _hugging_face_worker.py accelerate|trainer OUTPUT.pt

Imports torch_accel.transfer_to_accel, then drives accelerate and transformers
as a CUDA user does, with tiny random-weight Llama models built from a config
(nothing is downloaded). One process runs several checks, as importing
transformers takes most of its time. Writes what it saw to OUTPUT.pt (tensors
on the cpu); the test asserts on it.
"""

import sys
import tempfile

import torch

import torch_accel.transfer_to_accel  # noqa: F401  (the opt-in)
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

CONFIG = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=32,
)


def tiny_llama(layers: int = 2) -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(num_hidden_layers=layers, **CONFIG))


def reset_accelerate() -> None:
    # accelerate keeps one state per process; each check starts afresh.
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def linear_output_dtype(model: torch.nn.Module, run) -> torch.dtype:
    r"""The dtype of the first MLP projection's output while ``run`` runs (autocast shows there)."""
    seen = []
    handle = model.model.layers[0].mlp.gate_proj.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    try:
        run()
    finally:
        handle.remove()
    return seen[0]


def accelerator_step(mixed_precision: str) -> dict:
    reset_accelerate()
    accelerator = Accelerator(mixed_precision=mixed_precision)
    model = tiny_llama()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    ids = torch.arange(32, device=accelerator.device).reshape(2, 16) % 64
    losses = []

    def step() -> None:
        loss = model(input_ids=ids, labels=ids).loss
        accelerator.backward(loss)
        optimizer.step()
        losses.append(loss.detach())

    dtype = linear_output_dtype(accelerator.unwrap_model(model), step)
    return {
        "device": str(accelerator.device),
        "parameter_device": str(next(model.parameters()).device),
        "linear_dtype": dtype,
        "scaler": None if accelerator.scaler is None else (type(accelerator.scaler).__name__, accelerator.scaler._device),
        "loss": losses[0].cpu(),
        "state": {k: v.detach().cpu() for k, v in accelerator.unwrap_model(model).state_dict().items()},
    }


def cpu_step() -> dict:
    # The same step as accelerator_step("no"), on the cpu, without accelerate.
    model = tiny_llama()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ids = torch.arange(32).reshape(2, 16) % 64
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    return {"loss": loss.detach(), "state": {k: v.detach() for k, v in model.state_dict().items()}}


def device_maps() -> dict:
    folder = tempfile.mkdtemp()
    tiny_llama(layers=4).save_pretrained(folder)
    reference = LlamaForCausalLM.from_pretrained(folder)
    ids = torch.arange(8).reshape(1, 8)
    layer_bytes = sum(p.numel() * p.element_size() for p in reference.model.layers[0].parameters())
    results = {"reference_logits": reference(ids).logits.detach()}
    for name, kwargs in {
        "auto": {},
        "max_memory_int": {"max_memory": {0: 3 * layer_bytes, 1: "1GiB"}},
        "max_memory_accel": {"max_memory": {"accel:0": 3 * layer_bytes, "accel:1": "1GiB"}},
    }.items():
        model = LlamaForCausalLM.from_pretrained(folder, device_map="auto", **kwargs)
        results[name] = {
            "device_map": dict(model.hf_device_map),
            "parameter_devices": {n: str(p.device) for n, p in model.named_parameters()},
            "logits": model(ids.to("cuda")).logits.detach().cpu(),
        }
    return results


def trainer_runs() -> dict:
    class Tokens(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 8

        def __getitem__(self, i: int) -> dict:
            ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids}

    results = {}
    for name, kwargs in {"fp32": {}, "bf16": {"bf16": True}, "fp16": {"fp16": True}, "cpu": {"use_cpu": True}}.items():
        reset_accelerate()
        model = tiny_llama()
        args = TrainingArguments(
            output_dir=tempfile.mkdtemp(),
            per_device_train_batch_size=4,
            max_steps=2,
            report_to=[],
            save_strategy="no",
            disable_tqdm=True,
            **kwargs,
        )
        trainer = Trainer(model=model, args=args, train_dataset=Tokens())
        dtype = linear_output_dtype(model, trainer.train)
        results[name] = {
            "device": str(args.device),
            "parameter_device": str(next(model.parameters()).device),
            "linear_dtype": dtype,
            "scaler": None if trainer.accelerator.scaler is None else trainer.accelerator.scaler._device,
            "state": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        }
    return results


def main(mode: str, output: str) -> None:
    if mode == "accelerate":
        results = {
            "accelerator": {mp: accelerator_step(mp) for mp in ("no", "bf16", "fp16")},
            "cpu": cpu_step(),
            "device_maps": device_maps(),
        }
    elif mode == "trainer":
        results = trainer_runs()
    else:
        raise ValueError(mode)
    torch.save(results, output)


if __name__ == "__main__":
    main(*sys.argv[1:])
