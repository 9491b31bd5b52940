"""ChargebackConfig: which rate a GPU is priced at, and the settings it refuses."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from llmgw.config.chargeback import ANY_CLASS, ChargebackConfig


@pytest.mark.parametrize(
    ("rates", "name", "expected"),
    [
        # a class names a model whole: a shorter model number inside a longer one is another GPU
        ({"L4": 0.5, "*": 3.0}, "NVIDIA L40S", ANY_CLASS),
        ({"A10": 0.6, "*": 2.0}, "NVIDIA A100-SXM4-80GB", ANY_CLASS),
        ({"H200": 4.0, "*": 1.0}, "NVIDIA GH200 480GB", ANY_CLASS),
        ({"L4": 0.5, "*": 3.0}, "NVIDIA L4", "L4"),
        ({"A100": 1.2}, "NVIDIA A100-SXM4-80GB", "A100"),
        ({"H100": 2.5, "H100 NVL": 3.0}, "NVIDIA H100 NVL", "H100 NVL"),
        ({"h100": 2.5}, "NVIDIA H100 80GB HBM3", "h100"),
        ({"RTX 4090": 0.4}, "NVIDIA GeForce RTX 4090", "RTX 4090"),
        ({"A100": 1.2}, "NVIDIA H100", "NVIDIA H100"),  # not priced: the name itself, at nothing
    ],
)
def test_a_class_matches_whole_words_of_the_name(rates: dict[str, float], name: str, expected: str) -> None:
    assert ChargebackConfig(rates=rates).gpu_class(name) == expected


def test_a_cpu_engine_is_class_cpu() -> None:
    assert ChargebackConfig(rates={"*": 1.0}).gpu_class("") == "cpu"


@pytest.mark.parametrize("window", ["60s", "1s", "15m", "1h", "0.5m", 1.5])
def test_a_window_dividing_the_hour_is_taken(window: str | float) -> None:
    ChargebackConfig.model_validate({"window": window})


@pytest.mark.parametrize("window", ["7s", "59s", "40m", 1.1])
def test_a_window_that_straddles_hours_is_refused(window: str | float) -> None:
    # a window's charges go to the hour it starts in: one crossing an hour would put time in the wrong hour
    with pytest.raises(ValidationError, match="divide an hour"):
        ChargebackConfig.model_validate({"window": window})


def test_two_classes_differing_only_in_case_are_refused() -> None:
    # matching ignores case: which of the two rates a GPU got would be down to the order of the file
    with pytest.raises(ValidationError, match="twice"):
        ChargebackConfig(rates={"H100": 2.5, "h100": 9.0})


def test_llmgws_own_short_class_prices_first() -> None:
    """The class `ctl nodes` lists and a profile asks for ("H100-80G") is one an operator would price by; no GPU's
    name holds it, so matching names alone priced it at nothing."""
    cb = ChargebackConfig(rates={"h100-80g": 2.5, "H100": 2.2, "*": 1.0})
    assert cb.gpu_class("NVIDIA H100 80GB HBM3", "H100-80G") == "h100-80g"
    assert cb.gpu_class("NVIDIA H100 NVL", "H100-94G") == "H100"
    assert cb.gpu_class("NVIDIA L40S", "L40S-45G") == ANY_CLASS
