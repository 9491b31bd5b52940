"""The C library's version, read from the banner inside libc.so.6 through the host root: this machine's own, a
fixture's, none for a C library that carries no banner, and a new one once the file is replaced by an upgrade."""

from __future__ import annotations

import os
from pathlib import Path

from llmgw.agent.discovery.hostroot import HostRoot
from llmgw.agent.discovery.system import probe_glibc


def _libc(root: Path, text: bytes, rel: str = "lib/x86_64-linux-gnu/libc.so.6") -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".new")
    tmp.write_bytes(text)
    os.replace(tmp, p)  # as dpkg installs a file: a new one renamed over the old
    return p


def test_this_machines_glibc_is_read_from_its_library() -> None:
    expected = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.36"
    assert expected is not None and expected.startswith("glibc ")
    assert probe_glibc(HostRoot("/")) == expected.split()[1]


def test_a_banner_in_the_red_hat_place_and_none_for_musl(tmp_path: Path) -> None:
    banner = b"\x7fELF\0...GNU C Library (GNU libc) stable release version 2.34.\n\0"
    _libc(tmp_path / "rhel", banner, "lib64/libc.so.6")
    assert probe_glibc(HostRoot(tmp_path / "rhel")) == "2.34"
    _libc(tmp_path / "alpine", b"\x7fELF\0musl libc (x86_64)\0", "lib/libc.so.6")
    assert probe_glibc(HostRoot(tmp_path / "alpine")) == ""
    assert probe_glibc(HostRoot(tmp_path / "nothing")) == ""


def test_an_upgraded_library_is_read_again(tmp_path: Path) -> None:
    _libc(tmp_path, b"GNU C Library (Ubuntu GLIBC 2.35-0ubuntu3) stable release version 2.35.\n")
    assert probe_glibc(HostRoot(tmp_path)) == "2.35"
    assert probe_glibc(HostRoot(tmp_path)) == "2.35"
    _libc(tmp_path, b"GNU C Library (Ubuntu GLIBC 2.39-0ubuntu8) stable release version 2.39.\n")
    assert probe_glibc(HostRoot(tmp_path)) == "2.39"
