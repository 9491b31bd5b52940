"""A pypkg:// source names a file inside an installed package: nothing outside the package's own folder, however
the path is spelled."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import llmgw
from llmgw.agent.weights.resolve import resolve_source

PKG = Path(llmgw.__file__).parent


def test_a_file_inside_the_package_resolves() -> None:
    path, why = resolve_source("pypkg://llmgw/__init__.py")
    assert why == "" and path is not None and Path(path).resolve() == (PKG / "__init__.py").resolve()


@pytest.mark.parametrize("rel", [
    "../../pyproject.toml",             # climbs out of src/llmgw to the checkout
    "agent/../../../pyproject.toml",
    "/etc/passwd",                      # an absolute part replaces the package folder in a join
    "..",
])
def test_a_path_leaving_the_package_is_refused(rel: str) -> None:
    assert (PKG / rel).exists()  # the file is there: only the rule stops it
    path, why = resolve_source(f"pypkg://llmgw/{rel}")
    assert path is None and "outside the package" in why


def test_a_symlink_out_of_the_package_is_refused(tmp_path: Path) -> None:
    """A link inside the package that points out of it is followed by the engine, so it is judged by its target."""
    pkg = tmp_path / "pkg_with_link"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    secret = tmp_path / "secret.gguf"
    secret.write_bytes(b"GGUF" + b"x" * 8)
    (pkg / "model.gguf").symlink_to(secret)
    sys.path.insert(0, str(tmp_path))
    try:
        path, why = resolve_source("pypkg://pkg_with_link/model.gguf")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("pkg_with_link", None)
    assert path is None and "outside the package" in why
