"""OS packages a build needs: a held apt lock is waited out, saying so; a real failure says apt's own words."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.agent.installs.packages import WAITING, PackageTool, apt_install, missing_packages
from llmgw.core.clock import FakeClock
from llmgw.core.errors import InstallRefused


def stand_ins(tmp_path: Path) -> tuple[PackageTool, Path, Path]:
    """apt-get and dpkg-query that behave as Debian's do: apt-get refuses while another holds the lock."""
    lock, installed = tmp_path / "lock-frontend", tmp_path / "installed"
    installed.mkdir()
    apt = tmp_path / "apt-get"
    apt.write_text(f"""#!/bin/sh
if [ -e "{lock}" ]; then
  echo "E: Could not get lock {lock}. It is held by process 4242 (apt-get)" >&2
  echo "E: Unable to acquire the dpkg frontend lock ({lock}), is another process using it?" >&2
  exit 100
fi
shift 4  # install -y -q --no-install-recommends
for p in "$@"; do
  case "$p" in nosuch*) echo "E: Unable to locate package $p" >&2; exit 100;; esac
  touch "{installed}/$p"
done
""")
    query = tmp_path / "dpkg-query"
    query.write_text(f"""#!/bin/sh
p="$3"
if [ -e "{installed}/$p" ]; then printf 'install ok installed'; exit 0; fi
echo "dpkg-query: no packages found matching $p" >&2; exit 1
""")
    apt.chmod(0o755)
    query.chmod(0o755)
    return PackageTool(apt_get=str(apt), dpkg_query=str(query), lock_wait=600.0, lock_retry=10.0), lock, installed


async def test_a_held_lock_is_waited_out_and_reported_as_waiting(tmp_path: Path) -> None:
    tool, lock, _ = stand_ins(tmp_path)
    lock.touch()  # another apt-get (cloud-init, unattended-upgrades) holds it
    clock = FakeClock()
    said: list[str] = []
    waits: list[float] = []

    async def sleep(s: float) -> None:
        waits.append(s)
        clock.advance(s)
        if len(waits) == 3:
            lock.unlink()  # the other apt-get finishes

    assert await missing_packages(tool, ["libgomp1"]) == ["libgomp1"]
    await apt_install(tool, ["libgomp1"], said.append, clock, sleep)
    assert waits == [10.0, 10.0, 10.0]
    assert sum(1 for w in said if w.startswith(WAITING)) == 3, said
    assert any("is held by process 4242" in w or "another process" in w for w in said)
    assert await missing_packages(tool, ["libgomp1"]) == []


async def test_a_lock_held_past_ten_minutes_fails_the_pass_with_the_reason(tmp_path: Path) -> None:
    tool, lock, _ = stand_ins(tmp_path)
    lock.touch()
    clock = FakeClock()

    async def sleep(s: float) -> None:
        clock.advance(s)

    with pytest.raises(InstallRefused) as e:
        await apt_install(tool, ["libgomp1"], lambda w: None, clock, sleep)
    assert e.value.reason == "PackagesFailed"
    assert str(e.value).startswith(f"{WAITING} for 10 min"), e.value


async def test_a_package_apt_cannot_find_is_refused_in_apts_words(tmp_path: Path) -> None:
    tool, _, _ = stand_ins(tmp_path)

    async def sleep(s: float) -> None:
        raise AssertionError("nothing to wait for")

    with pytest.raises(InstallRefused) as e:
        await apt_install(tool, ["nosuch-lib"], lambda w: None, FakeClock(), sleep)
    assert "Unable to locate package nosuch-lib" in str(e.value)


async def test_a_node_without_dpkg_leaves_the_decision_to_the_library_check(tmp_path: Path) -> None:
    tool = PackageTool(dpkg_query=str(tmp_path / "no-such-dpkg-query"))
    assert await missing_packages(tool, ["libgomp1"]) is None
