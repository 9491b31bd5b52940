"""build-bundle.sh: a bundle holds what the source it says it was built from holds."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.scripts.onboarding_kit import ROOT, unpack_bundle


def test_a_bundle_built_from_head_has_head_installers(tmp_path: Path) -> None:
    """A bundle built without --tree takes its installers from the commit its RELEASE names, not the working tree."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for part in (".git", "scripts", "deploy"):
        shutil.copytree(ROOT / part, repo / part, symlinks=True)
    shutil.copy(ROOT / "requirements.lock", repo / "requirements.lock")
    with (repo / "scripts" / "install-node.sh").open("a") as f:
        f.write("# UNCOMMITTED EDIT\n")
    run = subprocess.run([str(repo / "scripts" / "build-bundle.sh"), "--out", str(tmp_path / "dist"),
                          "--python", sys.executable], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    here = unpack_bundle(Path(run.stdout.strip().splitlines()[-1]), tmp_path / "b")
    release = (here / "RELEASE").read_text()
    shipped = (here / "install-node.sh").read_text()
    assert "UNCOMMITTED EDIT" not in shipped or "source=commit" not in release, release



def test_two_bundles_built_from_the_tree_at_once_both_build_and_leave_it_as_it_was(tmp_path: Path) -> None:
    """Two test modules each build a bundle from the working tree, on two workers at once. Built in place, both
    wrote setuptools' build/ and egg-info in the tree: one failed ("File exists: build/bdist.linux-x86_64/wheel/
    llmgw-0.1.0.dist-info", a CI run). Each build now works on a copy of the tree, and writes nothing into it."""
    before = sorted(p.name for p in ROOT.iterdir())
    builds = [subprocess.Popen([str(ROOT / "scripts" / "build-bundle.sh"), "--tree", "--out", str(tmp_path / f"d{i}"),
                                "--python", sys.executable], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for i in range(2)]
    for b in builds:
        out, err = b.communicate(timeout=600)
        assert b.returncode == 0, err[-3000:]
        assert Path(out.strip().splitlines()[-1]).is_file()
    assert sorted(p.name for p in ROOT.iterdir()) == before, "the tree gained files (build/?)"
