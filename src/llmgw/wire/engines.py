"""Which engines every node should have, at which version, and where each build comes from.

The control plane names them (server.yaml `engines:`); each agent works out the rest for itself: which build fits
its processor and driver, which OS packages that build needs, and whether the result runs.
"""

from __future__ import annotations

import re
from typing import Annotated

from packaging.requirements import InvalidRequirement, Requirement
from pydantic import Field, field_validator, model_validator

from llmgw.core.strict import Frozen

# a version becomes part of a directory name on every node: no separators, no dot-dot, bounded
VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$"
# <accelerator>-<processor family>: cpu, vulkan, cuda (any CUDA: a pip build), cuda12, cuda13 (a CUDA major version,
# for engines that publish one build per major); x86_64 or arm64
VARIANT_PATTERN = r"^(cpu|vulkan|cuda|cuda1[0-9])-(x86_64|arm64)$"
CUDA_PATTERN = r"^([0-9]{2}\.[0-9]{1,2})?$"  # the CUDA a build was made with: "12.8"
GLIBC_PATTERN = r"^([0-9]\.[0-9]{1,3})?$"  # the oldest C library a build starts on: "2.39"
SHA256_PATTERN = r"^([0-9a-f]{64})?$"
PACKAGE_PATTERN = r"^[a-z0-9][a-z0-9.+-]{0,127}$"  # a Debian package name: it reaches apt-get's command line

Line = Annotated[str, Field(max_length=2048)]
DIGESTS_WIRE_VERSION = 13  # the first agents sent digests_unknown and digests_pending (they read no digest list)


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


class EngineVariant(Frozen):
    """One build of an engine version. An archive (url and sha256) for llama.cpp; pip requirements (one
    requirement per line, `--hash=` allowed) for the Python engines.

    What the build needs of a node is data, checked by the node before it installs (wire/builds.py): the CUDA it
    was made with (which NVIDIA driver it needs) and the oldest C library it starts on. A CUDA archive may come with
    a runtime companion (libcudart, libcublas) for nodes without a CUDA toolkit, unpacked beside the executable."""

    variant: str = Field(pattern=VARIANT_PATTERN)
    url: Line = ""
    sha256: str = Field(default="", pattern=SHA256_PATTERN)
    packages: Annotated[list[Annotated[str, Field(pattern=PACKAGE_PATTERN)]], Field(max_length=64)] = []
    requirements: Annotated[list[Line], Field(max_length=512)] = []
    cuda: str = Field(default="", pattern=CUDA_PATTERN)
    glibc: str = Field(default="", pattern=GLIBC_PATTERN)
    runtime_url: Line = ""
    runtime_sha256: str = Field(default="", pattern=SHA256_PATTERN)

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
        if self.url and self.requirements:
            raise ValueError(f"{self.variant}: either an archive (url) or pip requirements, not both")
        for what, url in (("url", self.url), ("runtime_url", self.runtime_url)):
            if url and not url.startswith(("https://", "http://")):
                raise ValueError(f"{self.variant}: {what} must be http:// or https://")
        if self.runtime_url and not self.url:
            raise ValueError(f"{self.variant}: a runtime companion goes with an archive (url)")
        if self.runtime_url and self.accelerator != "cuda":
            raise ValueError(f"{self.variant}: a runtime companion (CUDA's libraries) is for a cuda build")
        if self.cuda and self.accelerator != "cuda":
            raise ValueError(f"{self.variant}: cuda: {self.cuda} is for a cuda build")
        major = self.variant.split("-", 1)[0].removeprefix("cuda")
        if major.isdigit() and self.cuda.split(".")[0] != major:
            raise ValueError(f"{self.variant}: give the CUDA it was made with as cuda: {major}.N (not "
                             f"{self.cuda or 'nothing'})")
        return self

    @property
    def arch(self) -> str:
        return self.variant.split("-", 1)[1]

    @property
    def unpinned(self) -> bool:
        """An archive (or its runtime companion) without its sha256: it takes the one its release lists."""
        return bool((self.url and not self.sha256) or (self.runtime_url and not self.runtime_sha256))

    @property
    def accelerator(self) -> str:
        """cpu, vulkan or cuda: what the build computes on."""
        kind = self.variant.split("-", 1)[0]
        return "cuda" if kind.startswith("cuda") else kind


class EngineSource(Frozen):
    """An engine version and its builds. `digests_url`: a GitHub release's API address (`.../releases/tags/TAG`),
    whose assets list each file's sha256; an archive given without its own sha256 is checked against the digest
    listed there for its file name, read by the node before it downloads."""

    name: str = Field(min_length=1, max_length=32)
    version: str = Field(pattern=VERSION_PATTERN)
    variants: Annotated[list[EngineVariant], Field(max_length=16)] = []
    digests_url: Line = ""
    # wire version 13: the control plane reads each release's digest list for the whole fleet and sends the
    # digests in the variants; a node reads no list. What it could not learn, per variant, with why (the node passes
    # those builds over, DigestUnknown); and whether it has not read the list yet (the node waits to install)
    digests_unknown: Annotated[dict[Annotated[str, Field(pattern=VARIANT_PATTERN)], Line], Field(max_length=16)] = {}
    digests_pending: bool = False

    @model_validator(mode="after")
    def _unique(self) -> EngineSource:
        seen = [v.variant for v in self.variants]
        dup = {v for v in seen if seen.count(v) > 1}
        if dup:
            raise ValueError(f"{self.name} {self.version}: variant {sorted(dup)[0]} given twice")
        if self.digests_url and not self.digests_url.startswith(("https://", "http://")):
            raise ValueError(f"{self.name} {self.version}: digests_url must be http:// or https://")
        for v in self.variants:
            if v.unpinned and not self.digests_url and v.variant not in self.digests_unknown:
                raise ValueError(f"{v.variant}: an archive needs the sha256 its publisher gives for it (sha256, "
                                 "runtime_sha256), or the release's digests_url that lists it")
        return self


def machine_arch(arch: str) -> str:
    """The kernel's name for a processor family, in the variants' words."""
    a = arch.lower()
    if a in ("x86_64", "amd64"):
        return "x86_64"
    if a in ("aarch64", "arm64"):
        return "arm64"
    return a
