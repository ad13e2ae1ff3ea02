"""Ray's ``ray.util.accelerators``: the accelerator type names that ``accelerator_type=`` takes.

muster accepts ``accelerator_type`` and does not schedule by it (one node: a task runs on this
machine's GPUs whatever it names), so these are the strings Ray uses, for scripts that import them."""

from __future__ import annotations

from typing import Any

NVIDIA_TESLA_V100 = "V100"
NVIDIA_TESLA_P100 = "P100"
NVIDIA_TESLA_T4 = "T4"
NVIDIA_TESLA_P4 = "P4"
NVIDIA_TESLA_K80 = "K80"
NVIDIA_TESLA_A10G = "A10G"
NVIDIA_L4 = "L4"
NVIDIA_L40S = "L40S"
NVIDIA_A100 = "A100"
NVIDIA_A100_40G = "A100-40G"
NVIDIA_A100_80G = "A100-80G"
NVIDIA_H100 = "H100"
NVIDIA_H200 = "H200"
NVIDIA_H20 = "H20"
NVIDIA_B200 = "B200"
NVIDIA_B300 = "B300"
NVIDIA_GB200 = "GB200"
NVIDIA_GB300 = "GB300"
NVIDIA_RTX_PRO_6000 = "RTX-PRO-6000"
AMD_INSTINCT_MI100 = "AMD-Instinct-MI100"
AMD_INSTINCT_MI210 = "AMD-Instinct-MI210"
AMD_INSTINCT_MI250 = "AMD-Instinct-MI250X-MI250"
AMD_INSTINCT_MI300A = "AMD-Instinct-MI300A"
AMD_RADEON_R9_200_HD_7900 = "AMD-Radeon-R9-200-HD-7900"
AMD_RADEON_HD_7900 = "AMD-Radeon-HD-7900"
INTEL_MAX_1550 = "Intel-GPU-Max-1550"
INTEL_MAX_1100 = "Intel-GPU-Max-1100"
INTEL_GAUDI = "Intel-GAUDI"
AWS_NEURON_CORE = "aws-neuron-core"
GOOGLE_TPU_V2 = "TPU-V2"
GOOGLE_TPU_V3 = "TPU-V3"
GOOGLE_TPU_V4 = "TPU-V4"
GOOGLE_TPU_V5P = "TPU-V5P"
GOOGLE_TPU_V5LITEPOD = "TPU-V5LITEPOD"
GOOGLE_TPU_V6E = "TPU-V6E"
GOOGLE_TPU_V7X = "TPU-V7X"
APPLE_SILICON = "Apple-Silicon"
APPLE_M1 = "M1"
APPLE_M1_PRO = "M1-Pro"
APPLE_M1_MAX = "M1-Max"
APPLE_M1_ULTRA = "M1-Ultra"
APPLE_M2 = "M2"
APPLE_M2_PRO = "M2-Pro"
APPLE_M2_MAX = "M2-Max"
APPLE_M2_ULTRA = "M2-Ultra"
APPLE_M3 = "M3"
APPLE_M3_PRO = "M3-Pro"
APPLE_M3_MAX = "M3-Max"
METAX_C500 = "MXC500"
METAX_C550 = "MXC550"
MOBILINT_ARIES = "MOBILINT_ARIES"
MOBILINT_REGULUS = "MOBILINT_REGULUS"


def __getattr__(name: str) -> Any:
    raise AttributeError(
        f"module 'muster.util.accelerators' has no attribute {name!r}: pass the accelerator type as a string "
        "(accelerator_type='...'); muster does not schedule by it."
    )
