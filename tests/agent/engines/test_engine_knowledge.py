"""Each engine adapter (agent/engines/) is the one place that knows its engine: no code elsewhere asks which engine
it holds by comparing its name. Elsewhere asks the adapter (or, in the control plane, config/engines.py's table)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

from llmgw.agent.engines import ADAPTERS, builtin, installable
from llmgw.config.engines import DEFAULTS, TAKES_SPEED_FLAGS, EngineName
from llmgw.config.server import ModelSpec, Profile, SimSpeed
from llmgw.control.nodes.desired import engine_args

SRC = Path(__file__).resolve().parents[3] / "src" / "llmgw"
ADAPTERS_DIR = SRC / "agent" / "engines"
ENGINE_NAMES = {"sim", "llamacpp", "vllm", "sglang"}
COMPARISONS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


def _names_in(node: ast.expr) -> set[str]:
    """Engine names a comparison operand spells out: a string, or a tuple, list or set of strings."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return {i.value for i in items if isinstance(i, ast.Constant) and i.value in ENGINE_NAMES}


def engine_comparisons(source: str) -> list[str]:
    """Each `x == "sim"`, `x in ("vllm", ...)`, `"sim" in names` and `case "sim":` in `source`, as line: code."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(isinstance(op, COMPARISONS) for op in node.ops):
            if any(_names_in(e) for e in (node.left, *node.comparators)):
                out.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.MatchValue) and _names_in(node.value):
            out.append(f"{node.lineno}: case {ast.unparse(node.value)}")
    return out


def test_no_engine_name_is_compared_outside_the_adapters() -> None:
    bad = [f"{f.relative_to(SRC)}:{hit}" for f in sorted(SRC.rglob("*.py"))
           if not f.is_relative_to(ADAPTERS_DIR) for hit in engine_comparisons(f.read_text())]
    assert bad == []


def test_the_rule_sees_each_kind_of_comparison() -> None:
    src = ('if spec.engine == "sim": pass\n'
           'ok = engine not in ("llamacpp", "vllm")\n'
           'has = "sglang" in names\n'
           'match e:\n    case "vllm": pass\n'
           'fine = kind == "cpu" or name in ADAPTERS\n')
    assert [h.split(":")[0] for h in engine_comparisons(src)] == ["1", "2", "3", "5"]


def test_the_control_planes_table_agrees_with_the_adapters() -> None:
    """config/engines.py is what the control plane knows of engines without importing agent/engines: the same
    names, a default source for each engine a node installs, and the speed block only for llmgw's own."""
    assert set(get_args(EngineName)) == set(ADAPTERS) == set(ENGINE_NAMES)
    assert set(DEFAULTS) == set(installable())
    assert TAKES_SPEED_FLAGS and all(builtin(name) for name in TAKES_SPEED_FLAGS)


def test_the_speed_block_becomes_flags_only_for_the_engines_that_take_it() -> None:
    profile = Profile(args=["--max-running", "2"], sim=SimSpeed(tokens_per_second=50, tokens=4, load_seconds=2))
    sim = ModelSpec(name="m", source="s", engine="sim", profile=profile)
    assert engine_args(sim) == ["--max-running", "2", "--tokens-per-second", "50.0", "--tokens", "4",
                                "--load-seconds", "2.0"]
    llama = ModelSpec(name="m", source="s", engine="llamacpp", profile=profile)
    assert engine_args(llama) == ["--max-running", "2"]
