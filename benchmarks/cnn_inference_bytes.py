"""Per-sample inference bytes of the zoo's CNNs, counted by exact mode (needs gpusizer[torch]).

    python benchmarks/cnn_inference_bytes.py

For each zoo CNN, traces a forward pass (eval mode, no autograd, fp32) of the torchvision
model at its reference image size at batch 1 and 2, and prints the slope of the peak's
non-weight bytes (the input, the live activations and temporaries) per sample: the
``inference_bytes_per_sample_fp32`` field of data/models.yaml.
"""

from __future__ import annotations

from gpusizer.domain.run import make_run_config
from gpusizer.exact.source import ModelSource
from gpusizer.exact.trace import trace
from gpusizer.models.zoo import load_zoo

#: zoo id -> torchvision builder
TORCHVISION = {"alexnet": "alexnet", "vgg16": "vgg16", "resnet50": "resnet50", "resnet152": "resnet152",
               "inception_v3": "inception_v3", "mobilenet_v2": "mobilenet_v2", "densenet121": "densenet121",
               "efficientnet_b0": "efficientnet_b0"}


def per_sample(zoo_id: str) -> int:
    model = load_zoo().resolve(zoo_id)
    source = ModelSource(kind="torch-model", ref=f"torchvision.models:{TORCHVISION[model.id]}")
    other = []
    for batch in (1, 2):
        cfg = make_run_config(mode="inference", precision="fp32", batch=batch, image_size=model.image_size)
        other.append(trace(source, cfg).peak_bytes_by_kind["other"])
    return other[1] - other[0]


def main() -> None:
    for zoo_id in TORCHVISION:
        print(f"{zoo_id}: inference_bytes_per_sample_fp32: {per_sample(zoo_id)}")


if __name__ == "__main__":
    main()
