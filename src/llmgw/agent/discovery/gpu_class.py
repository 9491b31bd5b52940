"""The GPU class a catalog asks for ("H100-80G"): model from the marketing name, size from the memory reported."""

from __future__ import annotations

import re
from itertools import takewhile

# Brand words carry no information about what the card can run ("GRID P4-1Q" is a slice of a P4).
_BRANDS = {"NVIDIA", "TESLA", "GEFORCE", "QUADRO", "GRID"}
# Series prefixes that are not a model on their own: "RTX 4090" is the model "RTX4090".
_SERIES = {"RTX", "GTX"}
# Words after the number that make another card: an "RTX 2080 Ti" is not an "RTX 2080".
_VARIANTS = {"TI", "SUPER"}
# What nvidia-smi and NVML call a card the driver is too old to know: no model at all.
_NAMELESS = {"GRAPHICS DEVICE"}


def gpu_class(name: str, memory_mib: int) -> str:
    """ "NVIDIA H100 80GB HBM3", 81559 -> "H100-80G"; "NVIDIA L40S", 46068 -> "L40S-45G".

    The size comes from the memory the card reports, rounded to the nearest GiB, never from the name: names are
    inconsistent ("A100-SXM4-40GB", "H100 80GB HBM3", "L40S") and some say nothing about memory.
    """
    words = [w for w in re.split(r"[\s\-_]+", name.upper()) if w and w not in _BRANDS]
    if not words or " ".join(words) in _NAMELESS:
        model = "UNKNOWN"
    elif words[0] in _SERIES and len(words) > 2 and words[1] == "PRO":
        model = "".join(words[:3])  # "RTX PRO 6000 Blackwell": the number is the model, as in "RTX 4090"
    elif words[0] in _SERIES and len(words) > 1:
        model = words[0] + words[1] + "".join(takewhile(lambda w: w in _VARIANTS, words[2:]))
    else:
        model = words[0]
    if memory_mib <= 0:
        return model
    gib = int(memory_mib / 1024 + 0.5)  # round half up: Python's round() would send 44.5 to 44
    return f"{model}-{gib}G"
