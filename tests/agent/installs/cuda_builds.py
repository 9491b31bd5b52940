"""A llama.cpp CUDA release as upstream publishes it, made here with `cc`: the real llama-server with its libraries
and a CUDA backend plugin (a stub libggml-cuda.so that needs libcudart.so.12 and finds it only beside itself,
RUNPATH $ORIGIN), a runtime companion archive holding that libcudart (a versioned file and its links), a CPU
archive, and the release's GitHub-shaped JSON listing each file's sha256."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.agent.installs.archives import Member, dir_member, file_member, link_member, llama_archive, only, sha256
from tests.tools import unavailable

TAG = "b1"
CUDA_ARCHIVE = f"llama-{TAG}-bin-ubuntu-cuda-12.8-x64.tar.gz"
CUDART_ARCHIVE = f"cudart-llama-{TAG}-bin-ubuntu-cuda-12.8-x64.tar.gz"
CPU_ARCHIVE = f"llama-{TAG}-bin-ubuntu-x64.tar.gz"
RELEASE_API = f"repos/ggml-org/llama.cpp/releases/tags/{TAG}"
CUDART_FILE = "libcudart.so.12.8.90"


@dataclass(frozen=True)
class Stubs:
    cudart: Path  # libcudart.so.12.8.90, soname libcudart.so.12
    plugin: Path  # libggml-cuda.so: needs libcudart.so.12, looked for in its own folder


def _cc(work: Path, *args: str) -> None:
    cc = shutil.which("cc")
    if cc is None:
        unavailable("cc (a C compiler: apt-get install gcc) builds the stub CUDA libraries")
    r = subprocess.run([cc, *args], cwd=work, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def build_stubs(work: Path) -> Stubs:
    work.mkdir(parents=True, exist_ok=True)
    (work / "cudart.c").write_text("int cudaRuntimeGetVersion(int *v) { *v = 12080; return 0; }\n")
    _cc(work, "-shared", "-fPIC", "-Wl,-soname,libcudart.so.12", "-o", CUDART_FILE, "cudart.c")
    (work / "libcudart.so.12").symlink_to(CUDART_FILE)  # what the plugin is linked against, by its soname
    (work / "cuda.c").write_text("int cudaRuntimeGetVersion(int *v);\n"
                                 "int ggml_cuda_stub(void) { int v = 0; cudaRuntimeGetVersion(&v); return v; }\n")
    _cc(work, "-shared", "-fPIC", "-o", "libggml-cuda.so", "cuda.c", "-Wl,--no-as-needed", "libcudart.so.12",
        "-Wl,--enable-new-dtags,-rpath,$ORIGIN")
    return Stubs(cudart=work / CUDART_FILE, plugin=work / "libggml-cuda.so")


@functools.cache
def cuda_archive(stubs: Stubs) -> bytes:
    """llama-<tag>/ as the CPU archive, with the CUDA backend plugin beside llama-server."""
    return llama_archive(TAG, extra=[file_member(f"llama-{TAG}/libggml-cuda.so", stubs.plugin.read_bytes(), 0o755)])


def cudart_archive(stubs: Stubs, top: str = "", extra: list[Member] | None = None) -> bytes:
    """The runtime companion: libcudart's versioned file and its two links, under `top` if given."""
    pre = f"{top}/" if top else ""
    members = [dir_member(top)] if top else []
    members += [file_member(pre + CUDART_FILE, stubs.cudart.read_bytes(), 0o755),
                link_member(pre + "libcudart.so.12", CUDART_FILE), link_member(pre + "libcudart.so", "libcudart.so.12")]
    return only(*members, *(extra or []))


def release_json(files: dict[str, bytes], digests: dict[str, object] | None = None) -> bytes:
    """The release as GitHub's API gives it: each asset's name and "sha256:<hex>" digest (`digests` overrides
    one; a name mapped to None is left out)."""
    over = digests or {}
    assets = []
    for i, (name, data) in enumerate(sorted(files.items())):
        if name in over and over[name] is None:
            continue
        digest = over.get(name, f"sha256:{sha256(data)}")
        assets.append({"id": 1000 + i, "name": name, "size": len(data), "digest": digest, "state": "uploaded",
                       "content_type": "application/gzip", "browser_download_url": f"https://x/{name}"})
    return json.dumps({"tag_name": TAG, "name": TAG, "draft": False, "assets": assets}).encode()
