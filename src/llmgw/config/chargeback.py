"""server.yaml `chargeback`: what a GPU-hour costs per GPU class, and how the leader charges GPU time
(docs/tenants.md, "Chargeback").

A GPU class is a part of a GPU's name as its node reports it ("H100" matches "NVIDIA H100 80GB HBM3"), matched
without regard to case and as whole words ("L4" is not "NVIDIA L40S"); the longest class that matches is the GPU's,
and "*" matches any GPU no other class does.
A GPU no class matches costs nothing (its GPU-seconds are still counted)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator

from llmgw.config.types import Duration, within
from llmgw.core.strict import Strict

ANY_CLASS = "*"
NO_GPU = "cpu"  # the class of a replica holding no GPU (a CPU engine): its seconds count as one device's
HOUR = 3600.0


class ChargebackConfig(Strict):
    # price of one GPU-hour per GPU class, in `currency`
    rates: Annotated[dict[str, Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)]],
                     Field(max_length=256)] = {}
    currency: str = Field(default="USD", min_length=1, max_length=16, pattern=r"^[A-Za-z$€£¥]+$")
    # GPU time is charged in windows of this length, each once it ended `settle_after` ago: by then the usage of
    # the requests that ran in it has landed (a request still running is charged by its router's marks)
    window: Annotated[Duration, within(1, 3600)] = 60.0
    settle_after: Annotated[Duration, within(0, 86400)] = 900.0
    # busy time goes to the requests in flight by the tokens they processed; a prompt token weighs this much of a
    # generated one (1: tokens as the engine counts them; lower where prefill is cheap next to decode)
    prompt_weight: float = Field(default=1.0, ge=0, le=1000, allow_inf_nan=False)

    @field_validator("rates")
    @classmethod
    def _classes(cls, v: dict[str, float]) -> dict[str, float]:
        for name in v:
            if not name.strip() or len(name) > 128:
                raise ValueError(f"chargeback.rates: {name[:40]!r} is no GPU class (a part of a GPU's name, or *)")
        seen: set[str] = set()
        for name in v:
            if name.lower() in seen:  # matching ignores case: which rate won would be the file's order
                raise ValueError(f"chargeback.rates: {name[:40]!r} is named twice (case aside)")
            seen.add(name.lower())
        return v

    @field_validator("window")
    @classmethod
    def _divides_hour(cls, v: float) -> float:
        # a window's charges go to the hour it starts in: a window crossing an hour would misplace its time
        if HOUR % v:
            raise ValueError(f"chargeback.window: {v:g}s does not divide an hour")
        return v

    def gpu_class(self, gpu_name: str, short: str = "") -> str:
        """The class a GPU is priced by: the class llmgw names it by (`short`, "H100-80G", as `ctl nodes` and a
        profile's gpu_class say it) when a rate names that, else the longest class naming whole words of its name,
        else "*" if priced, else the name itself (priced at nothing)."""
        if not gpu_name and not short:
            return NO_GPU
        exact = next((c for c in self.rates if short and c.lower() == short.lower()), "")
        if exact:
            return exact
        low = gpu_name.lower()
        best = max((c for c in self.rates if c != ANY_CLASS and _names(c, low)), key=len, default="")
        if best:
            return best
        return ANY_CLASS if ANY_CLASS in self.rates else (gpu_name or short)

    def rate(self, gpu_class: str) -> float:
        """The price of one GPU-hour of the class (0: not priced)."""
        return self.rates.get(gpu_class, 0.0)


def _names(cls: str, low_name: str) -> bool:
    """Whether the class is in the (lower-cased) GPU name as whole words: "L4" is not in "nvidia l40s"."""
    head = r"(?<![0-9a-z])" if cls[:1].isalnum() else ""
    tail = r"(?![0-9a-z])" if cls[-1:].isalnum() else ""
    return re.search(head + re.escape(cls.lower()) + tail, low_name) is not None
