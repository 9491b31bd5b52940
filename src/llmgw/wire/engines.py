"""Which engines every node should have, at which version, and where each build comes from.

The control plane names them (server.yaml `engines:`); each agent works out the rest for itself: which build fits
its processor and driver, which OS packages that build needs, and whether the result runs.
"""

from __future__ import annotations

import re
from typing import Annotated

from packaging.requirements import InvalidRequirement, Requirement
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# a version becomes part of a directory name on every node: no separators, no dot-dot, bounded
VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$"
# cpu-x86_64, cpu-arm64, cuda-x86_64, cuda-arm64: the processor family, and whether it needs an NVIDIA driver
VARIANT_PATTERN = r"^(cpu|cuda)-(x86_64|arm64)$"
PACKAGE_PATTERN = r"^[a-z0-9][a-z0-9.+-]{0,127}$"  # a Debian package name: it reaches apt-get's command line

Line = Annotated[str, Field(max_length=2048)]


INDEX_OPTIONS = ("--index-url", "--extra-index-url", "--find-links", "--trusted-host")
_HASH = re.compile(r"^--hash=sha(256|384|512):[0-9a-f]+$")


def _check_requirement(line: str) -> None:
    if any(c in line for c in "\r\n\0"):
        raise ValueError(f"{line[:60]!r}: one requirement per line")
    if "${" in line:  # pip fills ${VAR} from the agent's own environment: a way to send its secrets away
        raise ValueError(f"{line[:60]!r}: no ${{...}} (pip would fill it from the node's environment)")
    words = line.split()
    if not words:
        raise ValueError("an empty requirement")
    if words[0].startswith("-"):
        option = words[0].split("=", 1)[0]
        # `--opt=value` alone, or `--opt value`: one value, never another option after it
        given = (len(words) == 1 and "=" in words[0]) or (len(words) == 2 and "=" not in words[0]
                                                             and not words[1].startswith("-"))
        if option not in INDEX_OPTIONS or not given:
            raise ValueError(f"{line[:80]!r}: only {', '.join(INDEX_OPTIONS)} (with one value) may be given as "
                             "options; the rest are requirements, each with optional --hash=")
        return
    spec = [w for w in words if not w.startswith("--hash=")]
    bad = [w for w in words if w.startswith("-") and not _HASH.match(w)]
    if bad:
        raise ValueError(f"{line[:80]!r}: {bad[0][:40]!r} is not --hash=sha256:HEX")
    try:
        Requirement(" ".join(spec))
    except InvalidRequirement as e:
        raise ValueError(f"{line[:80]!r} is not a requirement: {str(e).splitlines()[0]}") from None


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EngineVariant(Strict):
    """One build of an engine version. An archive (url and sha256) for llama.cpp; pip requirements (one
    requirement per line, `--hash=` allowed) for the Python engines."""

    variant: str = Field(pattern=VARIANT_PATTERN)
    url: Line = ""
    sha256: str = Field(default="", pattern=r"^([0-9a-f]{64})?$")
    packages: Annotated[list[Annotated[str, Field(pattern=PACKAGE_PATTERN)]], Field(max_length=64)] = []
    requirements: Annotated[list[Line], Field(max_length=512)] = []

    @field_validator("requirements")
    @classmethod
    def _requirements(cls, lines: list[str]) -> list[str]:
        """Requirements, each with optional --hash options, and where to find packages: nothing else pip reads in
        a requirements file (-r another file, -e a checkout, -c) reaches a node's pip."""
        for line in lines:
            _check_requirement(line)
        return lines

    @model_validator(mode="after")
    def _one_kind(self) -> EngineVariant:
        if self.url and not self.sha256:
            raise ValueError(f"{self.variant}: an archive needs the sha256 its publisher gives for it")
        if self.url and self.requirements:
            raise ValueError(f"{self.variant}: either an archive (url) or pip requirements, not both")
        if self.url and not self.url.startswith(("https://", "http://")):
            raise ValueError(f"{self.variant}: url must be http:// or https://")
        return self

    @property
    def arch(self) -> str:
        return self.variant.split("-", 1)[1]

    @property
    def cuda(self) -> bool:
        return self.variant.startswith("cuda-")


class EngineSource(Strict):
    name: str = Field(min_length=1, max_length=32)
    version: str = Field(pattern=VERSION_PATTERN)
    variants: Annotated[list[EngineVariant], Field(max_length=16)] = []

    @model_validator(mode="after")
    def _unique(self) -> EngineSource:
        seen = [v.variant for v in self.variants]
        dup = {v for v in seen if seen.count(v) > 1}
        if dup:
            raise ValueError(f"{self.name} {self.version}: variant {sorted(dup)[0]} given twice")
        return self


def machine_arch(arch: str) -> str:
    """The kernel's name for a processor family, in the variants' words."""
    a = arch.lower()
    if a in ("x86_64", "amd64"):
        return "x86_64"
    if a in ("aarch64", "arm64"):
        return "arm64"
    return a


def choose_variant(source: EngineSource, arch: str, nvidia_driver: str) -> tuple[EngineVariant | None, str]:
    """The build for this node, and a note for the operator (why this one, or why none). Pure.

    CUDA when an NVIDIA driver is loaded and the version has a CUDA build for this processor; the CPU build
    otherwise, saying so when the cards go unused for want of a CUDA build."""
    family = machine_arch(arch)
    by_name = {v.variant: v for v in source.variants}
    cpu = by_name.get(f"cpu-{family}")
    if nvidia_driver:
        cuda = by_name.get(f"cuda-{family}")
        if cuda is not None:
            return cuda, ""
        if cpu is not None:
            return cpu, (f"an NVIDIA driver ({nvidia_driver}) is loaded but {source.name} {source.version} has no "
                         f"cuda-{family} build configured: the CPU build is used")
    if cpu is not None:
        return cpu, ""
    offered = ", ".join(sorted(by_name)) or "none"
    return None, f"{source.name} {source.version} has no build for {family} (offered: {offered})"
