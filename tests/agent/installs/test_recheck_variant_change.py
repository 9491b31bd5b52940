"""Second review: a re-check in flight when the wanted build changes.

installer.py:355-357: a driver that appears (or goes) changes t.variant and clears t.status; the re-check task
started earlier for the *old* build (installer.py:366) is not cancelled, and no install starts while it runs
(installer.py:368 waits for t.check). When it ends, installer.py:385-386 stores the old build's status as this
track's status (t.task is None). From then on the track says "runs" for a build that is not the wanted variant,
no install of the wanted one ever starts (status.runs), and every re-check re-probes the old path: a CPU build is
reported (and used) on a node whose driver asks for CUDA for good, and a CUDA build whose driver is gone is kept as
the build that runs. (Without a shard on the old build, _remove_unused deletes it under the re-check's feet:
busy, installer.py:434, counts installs, not re-checks.)"""

from __future__ import annotations

from pathlib import Path

from llmgw.agent.installs.installer import Installer
from llmgw.wire.engines import EngineSource, EngineVariant
from llmgw.wire.messages import Hardware
from tests.agent.installs.archives import sha256
from tests.agent.installs.fake_builds import fake_archive, fake_server_script
from tests.agent.installs.release import Release, release_server
from tests.agent.installs.test_install import context
from tests.agent.installs.test_installer import X86, settle

GPU = Hardware(arch="x86_64", nvidia_driver="550.54")


async def test_a_recheck_in_flight_pins_the_old_variant_after_a_driver_appears(tmp_path: Path) -> None:
    slow = tmp_path / "slow"
    with release_server(Release()) as rel:
        cpu = fake_archive("b1", fake_server_script(slow_flag=slow))
        cuda = fake_archive("b1", fake_server_script())
        rel.files["cpu.tar.gz"], rel.files["cuda.tar.gz"] = cpu, cuda
        src = EngineSource(name="llamacpp", version="b1", variants=[
            EngineVariant(variant="cpu-x86_64", url=rel.url("cpu.tar.gz"), sha256=sha256(cpu)),
            EngineVariant(variant="cuda-x86_64", url=rel.url("cuda.tar.gz"), sha256=sha256(cuda))])
        inst = Installer(context(tmp_path / "engines"))
        await inst.converge([src], X86, set())
        await settle(inst)
        cpu_path = inst.statuses()[0].path
        assert "cpu-x86_64" in cpu_path
        slow.write_text("1")  # the re-check takes a second (vLLM's: 20 s)
        inst.ctx.clock.advance(601)  # type: ignore[attr-defined]
        await inst.converge([src], X86, set())  # the re-check starts
        used = {Path(cpu_path)}  # a shard serves from the cpu build meanwhile: it stays on disk
        await inst.converge([src], GPU, used)  # the driver is loaded now: the cuda build is wanted
        await settle(inst)
        slow.unlink()
        for _ in range(3):
            await inst.converge([src], GPU, used)
            await settle(inst)
        (st,) = inst.statuses()
        t = inst.tracks["llamacpp"]
        print(f"\nwanted {t.variant.variant if t.variant else None}; reported runs={st.runs} path={st.path}")
        assert "cuda-x86_64" in st.path, f"the cuda build is wanted; the node reports {st.path} as its llamacpp"
