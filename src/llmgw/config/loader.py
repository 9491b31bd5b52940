"""Read a YAML file into a pydantic model; every problem names the file and the key path."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from llmgw.core.errors import ConfigError

M = TypeVar("M", bound=BaseModel)

_FRIENDLY = {
    "extra_forbidden": "unknown key",
    "missing": "field required",
}


def key_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def describe(err: ValidationError) -> list[str]:
    problems = []
    for e in err.errors():
        msg = _FRIENDLY.get(e["type"], e["msg"])
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        problems.append(f"{key_path(tuple(e['loc']))}: {msg}")
    return problems


def parse(model: type[M], data: object, source: str) -> M:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(source, ["(top level): must be a mapping of keys"])
    try:
        return model.model_validate(data, context={"base_dir": str(Path(source).parent)})
    except ValidationError as e:
        raise ConfigError(source, describe(e)) from None


def load(model: type[M], path: str | Path) -> M:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(str(p), [f"cannot read: {e.strerror}"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise ConfigError(str(p), [f"{where}not valid YAML: {getattr(e, 'problem', e)}"]) from None
    return parse(model, data, str(p))
