"""No test names an address, a port range or a subnet it binds or routes: each comes from bench/addresses.py, which
gives every pytest-xdist worker slices of its own. A literal in a test file is how two tests running side by side
came to share 127.0.0.95:28500-28599 (and a CI run failed on such a pair), so a literal fails here instead.

What is flagged, in tests/ and bench/:
- a loopback address other than 127.0.0.1 (a CIDR such as 127.0.0.0/8 is configuration, not an address);
- a port range: a string "LO-HI", a `port_range=` given a literal or an f-string, a (LO, HI) pair of ports;
- in a file that builds hosts of network namespaces (tests/netns.py and its users), any private-range address."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ALLOCATOR = {"bench/addresses.py", "tests/test_no_literal_addresses.py"}
LOOPBACK = re.compile(r"127\.\d{1,3}\.\d{1,3}\.(\d{1,3}|\{)(?!/)")
RANGE = re.compile(r"^\d{4,5}-\d{4,5}$")
PRIVATE = re.compile(r"\b(10\.\d{1,3}|172\.(1[6-9]|2\d|3[01])|192\.168)\.(\d{1,3}|\{)[.\d{]*(?![\d/])")
HOST_BUILDERS = ("tests.netns", "tests.scripts.machine", "tests.scripts.onboarding_kit")


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    """Every string constant, and the literal parts of every f-string with the holes shown as "{"."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{"
                           for v in node.values)
            out.append((node.lineno, text))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append((node.lineno, node.value))
    return out


def _is_port(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, int) and 1024 <= node.value <= 65535


def literals(source: str, builds_hosts: bool) -> list[str]:
    """The literal addresses, port ranges and (where hosts are built) private addresses in `source`."""
    tree = ast.parse(source)
    bad: list[str] = []
    for line, text in _strings(tree):
        if m := LOOPBACK.search(text):
            if m.group(0) != "127.0.0.1":
                bad.append(f"{line}: loopback address {text!r}")
        if RANGE.match(text):
            bad.append(f"{line}: port range {text!r}")
        if builds_hosts and (m := PRIVATE.search(text)):
            bad.append(f"{line}: address {text!r} in a file that builds hosts")
    for node in ast.walk(tree):
        literal = isinstance(node, ast.keyword) and isinstance(node.value, ast.Constant | ast.JoinedStr)
        if literal and isinstance(node, ast.keyword) and node.arg == "port_range":
            bad.append(f"{node.value.lineno}: port_range={ast.unparse(node.value)}")
        if isinstance(node, ast.Tuple) and len(node.elts) == 2 and all(_is_port(e) for e in node.elts):
            lo, hi = (e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, int))
            if 9 <= hi - lo <= 999:  # a range of ports, not a port and another number
                bad.append(f"{node.lineno}: port range {ast.unparse(node)}")
    return bad


def builds_hosts(source: str) -> bool:
    return any(f"from {m} import" in source or f"import {m}" in source for m in HOST_BUILDERS)


def test_no_test_or_bench_names_an_address_or_port_range_of_its_own() -> None:
    bad = []
    for path in sorted([*(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ALLOCATOR or "/fixtures/" in rel:
            continue
        source = path.read_text()
        bad += [f"{rel}:{b}" for b in literals(source, rel == "tests/netns.py" or builds_hosts(source))]
    assert not bad, "take these from bench/addresses.py (loopback(), engine_ports(), subnet()):\n" + "\n".join(bad)


def test_the_rule_sees_each_kind_of_literal() -> None:
    """A test of the test: each shape a literal has taken in this suite is caught, and what the allocator hands out
    or configuration names is not."""
    caught = literals(
        'NodePlan(address="127.0.0.95", port_range="28500-28599")\n'
        'NodePlan(address=f"127.0.0.{60 + i}", port_range=f"{27500 + 100 * i}-{27599 + 100 * i}")\n'
        'HostileNode(p, "n", "127.0.0.1", (27100, 27199))\n'
        'Machine(address=f"10.251.{subnet}.{host}", gateway="10.251.5.1")\n',
        builds_hosts=True,
    )
    assert sorted(c.split(":")[0] for c in caught) == ["1", "1", "1", "2", "2", "3", "4", "4"], caught
    assert literals(
        'NodePlan(address=loopback(), port_range=engine_ports())\n'
        'connect("127.0.0.1", free_port()); allowed = ("127.0.0.0/8", "10.0.0.0/8")\n'
        'ShardAssignment(address="10.0.0.1", serve_port=20000); pair = (20000, 20001)\n',
        builds_hosts=False,
    ) == []
