"""What else a weights directory's `hub/` holds (a file, a link to nothing, a folder of no directory of ours, as a
Hugging Face cache's `version.txt` is) hides none of the hub directories laid out beside it from the report."""

from __future__ import annotations

import os
from pathlib import Path

from llmgw.agent.weights import hubdir, local
from llmgw.agent.weights.fetcher import Ready
from llmgw.sim.hub import HubHandle
from tests.agent.weights.hubkit import hub_fetcher, plan_for
from tests.agent.weights.kit import settled


async def test_stray_entries_in_hub_hide_no_directory(tmp_path: Path, hub: HubHandle) -> None:
    source, plan = plan_for(hub)
    f = hub_fetcher(tmp_path)
    try:
        assert isinstance(await settled(f, source, plan), Ready)
    finally:
        await f.close()
    assert hubdir.held_sources([tmp_path]) == [source]
    root = tmp_path / local.HUB
    (root / "version.txt").write_text("1")
    os.symlink(tmp_path / "nowhere", root / "zz--gone")
    (root / "aa--empty").mkdir()
    (root / "aa--empty" / "notes.txt").write_text("x")
    assert hubdir.held_sources([tmp_path]) == [source]
