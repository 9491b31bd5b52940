"""agent/space.py: whether a disk that was full has room again."""

from __future__ import annotations

from pathlib import Path

from llmgw.agent.space import SPACE_BACK, free_bytes, room_again


def test_room_again_only_once_space_grew_by_the_margin(tmp_path: Path) -> None:
    free = free_bytes(tmp_path)
    assert free is not None and free > 0
    assert not room_again(tmp_path, None)  # the failure was not for want of space
    assert not room_again(tmp_path, free)  # no more room than when it failed
    assert room_again(tmp_path, max(0, free - 2 * SPACE_BACK))


def test_a_directory_not_made_yet_is_measured_on_its_nearest_parent(tmp_path: Path) -> None:
    assert free_bytes(tmp_path / "not" / "yet") is not None
