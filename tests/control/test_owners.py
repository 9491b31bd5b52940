"""The plane builds exactly the owners control/owners.py declares, each an object of its declared module: a new owner
the declaration lacks, or a declared one the plane no longer builds, fails here."""

from __future__ import annotations

from pathlib import Path

from llmgw.control.owners import OWNERS
from llmgw.control.plane import ControlPlane
from tests.harness import plane_in

# what the plane holds besides its owners: what it is handed, and its own gauges
NOT_OWNERS = {"cfg", "store", "clock", "writer", "timings", "gauges"}


def built(plane: ControlPlane) -> dict[str, object]:
    """Each declared owner's path ("registry", "limit_counters.gpu") -> the object the plane holds there."""
    out = {}
    for o in OWNERS:
        holder = getattr(plane, o.within) if o.within else plane
        out[o.path] = getattr(holder, o.name)
    return out


def test_the_plane_builds_the_declared_owners_each_of_its_module(tmp_path: Path) -> None:
    plane = plane_in(tmp_path)
    wrong = [f"{path}: {type(obj).__module__}" for (path, obj), o in zip(built(plane).items(), OWNERS, strict=True)
             if type(obj).__module__ != "llmgw.control." + o.module.removesuffix(".py").replace("/", ".")]
    assert wrong == []
    assert set(vars(plane)) - NOT_OWNERS == {o.name for o in OWNERS if not o.within}


def test_each_owner_is_declared_once() -> None:
    assert len({o.path for o in OWNERS}) == len({o.module for o in OWNERS}) == len(OWNERS)
    assert {o.within for o in OWNERS} - {o.name for o in OWNERS if not o.within} == {""}
