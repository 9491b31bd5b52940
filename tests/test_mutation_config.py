"""`make mutation` names its modules and their tests by path (pyproject's [tool.mutmut]); a module or test moved
without the list following it drops out of the mutation run without a word. Every path named must exist."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def missing(cfg: dict[str, Any], root: Path) -> list[str]:
    named = [*cfg.get("only_mutate", []), *cfg.get("pytest_add_cli_args_test_selection", []),
             *cfg.get("also_copy", [])]
    return [p for p in named if not (root / p).exists()]


def test_every_path_the_mutation_config_names_exists() -> None:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    assert cfg["only_mutate"] and cfg["pytest_add_cli_args_test_selection"]
    assert missing(cfg, ROOT) == []


def test_a_moved_module_is_found_missing() -> None:
    assert missing({"only_mutate": ["src/llmgw/control/accounting/accounting.py"]}, ROOT) == [
        "src/llmgw/control/accounting/accounting.py"]
