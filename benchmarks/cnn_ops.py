"""Per-operation FLOPs and bytes of the zoo's CNNs, for the performance model (needs gpusizer[torch]).

    python benchmarks/cnn_ops.py            # print a summary
    python benchmarks/cnn_ops.py --write    # rewrite data/cnn_ops.json

For each zoo CNN (the torchvision model), an inference step (eval mode, no autograd) in fp32
and in mixed precision (CUDA-style autocast to fp16) is traced under fake tensors, and every
ATen operation the step runs is recorded:

- its FLOPs, from torch.utils.flop_counter (convolutions and matrix products; 0 for the rest);
- its bytes: the sizes of the tensors it reads and writes, each counted once per operation, as
  an unfused kernel of that operation moves them through memory.

The step is traced at two batch sizes, so each operation's bytes split into a part per sample
(activations) and a fixed part (weights and their casts); FLOPs are per sample. Identical
operations are merged with a count. The table is what eager PyTorch runs; fused engines
(TensorRT) move fewer bytes, and the engine uses this table only for framework runs.

    python benchmarks/cnn_ops.py --train    # also trace training steps (forward and backward)

prints the same summary for training steps, which data/cnn_ops.json does not hold (the
engine times CNN training from its totals; docs/method.md, "CNN operations", says why).
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: zoo id -> torchvision builder (the models whose parameter counts the zoo cites)
TORCHVISION = {"alexnet": "alexnet", "vgg16": "vgg16", "resnet50": "resnet50", "resnet152": "resnet152",
               "inception_v3": "inception_v3", "mobilenet_v2": "mobilenet_v2", "densenet121": "densenet121",
               "efficientnet_b0": "efficientnet_b0"}
#: operations that move no data of their own (views, metadata, profiler markers)
NO_TRAFFIC = {"detach", "view", "_unsafe_view", "t", "transpose", "expand", "as_strided", "empty", "empty_like",
              "empty_strided", "alias", "device", "sym_size", "sym_stride", "sym_numel", "_record_function_enter_new",
              "_record_function_exit", "_reshape_alias", "slice", "select", "unsqueeze", "squeeze", "permute",
              "reshape", "flatten", "lift_fresh"}
BATCHES = (2, 4)
#: fp32 math; autocast to fp16 over fp32 weights (AMP); a .half() model (pure fp16 or bf16)
PRECISIONS = ("fp32", "mixed", "half")
#: builder arguments that change no operation: Inception v3's scipy initialisation reads values
BUILD_KWARGS: dict[str, dict[str, Any]] = {"inception_v3": {"init_weights": False}}


def _nbytes(value: Any) -> int:
    import torch

    if isinstance(value, torch.Tensor):
        return int(value.numel() * value.element_size())
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return 0


def _conv_flops(name: str, args: Any, out: Any) -> int | None:
    """A convolution's FLOPs from its shapes: 2 x output elements x (input channels per group x
    kernel area), once per gradient a backward computes. torch.utils.flop_counter's backward
    formula ignores groups, which counts a depthwise convolution's backward up to 100x over."""
    if name == "convolution":
        weight = args[1]
        return int(2 * out.numel() * weight.shape[1] * weight[0, 0].numel())
    if name == "convolution_backward":
        grad_out, weight, mask = args[0], args[2], args[10]
        return int(2 * grad_out.numel() * weight.shape[1] * weight[0, 0].numel() * (int(mask[0]) + int(mask[1])))
    return None


def trace_ops(zoo_id: str, batch: int, train: bool, precision: str) -> list[tuple[str, int, int]]:
    """(operation, FLOPs, bytes) of one step, in the order the step runs them."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    from gpusizer.exact._build import import_torchvision
    from gpusizer.models.zoo import load_zoo

    torchvision = import_torchvision()
    size = load_zoo().resolve(zoo_id).image_size
    ops: list[tuple[str, int, int]] = []

    class Record(TorchDispatchMode):
        def __init__(self, counter: FlopCounterMode) -> None:
            super().__init__()
            self.counter = counter

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            before = self.counter.get_total_flops()
            out = func(*args, **kwargs)
            name = str(func.overloadpacket.__name__)
            if name not in NO_TRAFFIC:
                moved = _nbytes(list(args)) + _nbytes(list(kwargs.values())) + _nbytes(out)
                flops = _conv_flops(name, args, out)
                if flops is None:
                    flops = int(self.counter.get_total_flops() - before)
                ops.append((name, flops, moved))
            return out

    default = torch.get_default_dtype()
    with FakeTensorMode(allow_non_fake_inputs=True):
        # a .half() model: built in fp16 (converting fake parameters in place is not supported)
        torch.set_default_dtype(torch.float16 if precision == "half" else torch.float32)
        try:
            model = getattr(torchvision.models, TORCHVISION[zoo_id])(**BUILD_KWARGS.get(zoo_id, {}))
            x = torch.randn(batch, 3, size, size, requires_grad=False)
        finally:
            torch.set_default_dtype(default)
        model.train(train)
        counter = FlopCounterMode(display=False)
        grad = torch.enable_grad() if train else torch.no_grad()
        with grad, counter, Record(counter):
            # CPU autocast to fp16 follows CUDA's op lists for convolutions and matrix products
            with torch.autocast("cpu", dtype=torch.float16, enabled=precision == "mixed"):
                out = model(x)
                logits = [out] if isinstance(out, torch.Tensor) else [t for t in out if t is not None]
                loss = sum(t.float().sum() for t in logits)
            if train:
                loss.backward()  # type: ignore[union-attr]
    return ops


def op_table(zoo_id: str, train: bool, precision: str) -> list[list[Any]]:
    """Rows [count, kind, flops per sample, bytes per sample, fixed bytes], kind g (matmul or
    convolution) or s (streaming), merged over identical operations."""
    small, large = (trace_ops(zoo_id, b, train, precision) for b in BATCHES)
    if [n for n, _, _ in small] != [n for n, _, _ in large]:
        raise RuntimeError(f"{zoo_id}: the step runs different operations at batch {BATCHES[0]} and {BATCHES[1]}")
    span = BATCHES[1] - BATCHES[0]
    merged: collections.Counter[tuple[str, int, int, int]] = collections.Counter()
    for (_, f0, b0), (_, f1, b1) in zip(small, large, strict=True):
        per_sample_bytes = (b1 - b0) // span
        fixed = b0 - BATCHES[0] * per_sample_bytes
        flops = (f1 - f0) // span
        kind = "g" if f1 > 0 else "s"
        merged[(kind, flops, per_sample_bytes, max(0, fixed))] += 1
    return [[count, kind, f, b, w] for (kind, f, b, w), count in sorted(merged.items(), key=lambda kv: -kv[0][2] - kv[0][3])]


def build(modes: tuple[str, ...] = ("infer",)) -> dict[str, Any]:
    import torch

    from gpusizer.models.zoo import load_zoo

    models: dict[str, Any] = {}
    for zoo_id in TORCHVISION:
        entry: dict[str, Any] = {"image_size": load_zoo().resolve(zoo_id).image_size}
        for mode in modes:
            entry[mode] = {prec: op_table(zoo_id, mode == "train", prec) for prec in PRECISIONS}
        models[zoo_id] = entry
    return {"schema_version": 1, "generated_by": "benchmarks/cnn_ops.py", "torch": torch.__version__,
            "models": models}


DESCRIPTION = [
    "Per-operation FLOPs and bytes of the zoo's CNNs: written by benchmarks/cnn_ops.py --write; do not edit.",
    "Each row: [count, kind, flops_per_sample, bytes_per_sample, fixed_bytes]. kind g: a convolution or matrix",
    "product (timed against the matmul peak), s: a streaming operation (batch norm, activation, addition,",
    "pooling, casts; timed against bandwidth). Bytes are what an unfused eager kernel reads and writes; fixed",
    "bytes do not grow with the batch (weights and their autocast copies). infer: eval mode without autograd.",
    "mixed: autocast to fp16 over fp32 weights; half: a .half() model. JSON, not YAML: the engine reads it on every CNN inference estimate, and",
    "parsing 1,400 rows of YAML in pure Python takes 0.2 s.",
]


def _dump(doc: dict[str, Any]) -> str:
    """JSON with one operation row per line, so a regenerated table diffs line by line."""
    import json

    lines = ["{", f'  "description": {json.dumps(DESCRIPTION)},']
    lines += [f'  "{key}": {json.dumps(doc[key])},' for key in ("schema_version", "generated_by", "torch")]
    lines.append('  "models": {')
    for i, (zoo_id, entry) in enumerate(doc["models"].items()):
        lines.append(f'    "{zoo_id}": {{"image_size": {entry["image_size"]}, "infer": {{')
        for j, prec in enumerate(PRECISIONS):
            rows = ",\n".join(f"      {json.dumps(r)}" for r in entry["infer"][prec])
            lines.append(f'     "{prec}": [\n{rows}\n     ]' + ("," if j < len(PRECISIONS) - 1 else ""))
        lines.append("    }}" + ("," if i < len(doc["models"]) - 1 else ""))
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite data/cnn_ops.json")
    parser.add_argument("--train", action="store_true", help="also trace training steps (summary only)")
    args = parser.parse_args(argv)
    modes = ("infer", "train") if args.train else ("infer",)
    doc = build(modes)
    for zoo_id, entry in doc["models"].items():
        for mode in modes:
            rows = entry[mode]["mixed"]
            flops = sum(c * f for c, _, f, _, _ in rows)
            moved = sum(c * b for c, _, _, b, _ in rows)
            print(f"{zoo_id:16s} {mode:5s} mixed: {flops / 1e9:7.2f} GFLOP and {moved / 1e6:7.1f} MB per sample, "
                  f"{sum(r[0] for r in rows)} operations in {len(rows)} rows")
    if args.write:
        (ROOT / "data" / "cnn_ops.json").write_text(_dump(doc))
        print("wrote data/cnn_ops.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
