"""Who makes a GPU, and what it means for the user: which vendors a command considers unless
asked, and the software-stack caveat of the others. ``recommend`` and ``serve`` share it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, get_args

from gpusizer.errors import UsageError

if TYPE_CHECKING:
    from gpusizer.hardware.catalog import Gpu

#: Who makes the GPU (the catalog's ``vendor`` field). The architecture order and the Tensor
#: Core facts in the catalog are NVIDIA's.
Vendor = Literal["nvidia", "amd", "intel"]
VENDORS: tuple[str, ...] = get_args(Vendor)
VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD", "intel": "Intel"}
#: what ``--vendor`` accepts: one vendor, or any
VENDOR_CHOICES: tuple[str, ...] = (*VENDORS, "any")
#: NVIDIA only unless asked: the rules and the performance model's calibration are NVIDIA's,
#: and most ML code assumes CUDA
DEFAULT_VENDOR = "nvidia"
#: the software each non-NVIDIA vendor's accelerators need instead of CUDA
SOFTWARE_STACK = {"amd": "ROCm/HIP (PyTorch's ROCm build)",
                  "intel": "the Intel Gaudi software (SynapseAI, PyTorch's HPU backend)"}


#: each vendor's GPU-to-GPU fabric inside a node, as its documentation names it (NVIDIA: NVLink;
#: AMD: Infinity Fabric links, xGMI, between Instinct OAMs; Intel: the RoCE ports on each Gaudi die
#: that link the accelerators of a box all-to-all)
GPU_FABRIC = {"nvidia": "NVLink", "amd": "Infinity Fabric (xGMI) link", "intel": "on-die RoCE scale-up link"}


def gpu_fabric(gpu: Gpu) -> str | None:
    """How a multi-GPU node of ``gpu`` links its GPUs: "nvlink", "infinity-fabric", "roce" (Gaudi's
    on-die ports), "pcie" (none of them), or None where the catalog does not say: an NVIDIA SXM module
    or superchip without an NVLink figure sits on an NVLink board whose bandwidth is unpublished."""
    if gpu.nvlink_gb_s is not None:
        return "nvlink"
    form = gpu.form_factor.lower()
    if gpu.vendor == "nvidia" and (gpu.is_sxm or "superchip" in form):
        return None
    if form.startswith("oam"):
        return {"amd": "infinity-fabric", "intel": "roce"}.get(gpu.vendor)
    return "pcie"


def check_vendor(vendor: str) -> str:
    """``vendor`` in lower case, or a usage error naming the choices."""
    v = vendor.lower()
    if v not in VENDOR_CHOICES:
        raise UsageError(f"{vendor!r} is not one of {', '.join(VENDOR_CHOICES)}", field="vendor")
    return v


def vendor_wanted(vendor: str, gpu: Gpu) -> bool:
    """Whether a command asked for ``vendor``'s GPUs (or any) considers ``gpu``."""
    return vendor == "any" or gpu.vendor == vendor


def vendor_notes(gpus: Sequence[Gpu], speeds: bool = True, verb: str = "listed") -> tuple[str, ...]:
    """The software-stack caveat, once per non-NVIDIA vendor among ``gpus`` (those ``verb``:
    listed, or checked); ``speeds``: the listing shows modelled speeds, so say where their
    constants come from."""
    vendors = sorted({g.vendor for g in gpus if g.vendor != "nvidia"})
    calibration = (". Their speeds come from constants calibrated on NVIDIA GPUs only, with a widened error band"
                   if speeds else "")
    return tuple(
        f"{VENDOR_NAMES.get(vendor, vendor)} GPUs {verb} "
        f"({', '.join(g.id for g in gpus if g.vendor == vendor)}): CUDA-only code (custom CUDA kernels, "
        f"CUDA-only libraries) does not run on them; they need {SOFTWARE_STACK.get(vendor, 'their own software stack')}"
        f"{calibration}"
        for vendor in vendors)
