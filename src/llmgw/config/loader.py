"""Read a YAML file into a pydantic model; every problem names the file and the key path. A key that was renamed
(RENAMED, the one list) is still read under its old name, as the new one, with a warning naming both, so a file
written for an earlier release keeps working until its operator renames the key; a section holding such a key is a
`Renames` model whose `section` says where it sits."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import yaml
from pydantic import BaseModel, ValidationError, ValidationInfo, model_validator

from llmgw.core.errors import ConfigError
from llmgw.core.strict import Strict

M = TypeVar("M", bound=BaseModel)
log = logging.getLogger(__name__)

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
        return model.model_validate(data, context={"base_dir": str(Path(source).parent), "source": source})
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


@dataclass(frozen=True)
class Renamed:
    section: str  # where the key sits, as an operator writes it: "" (the top level), "router", "models[].scaling"
    old: str
    new: str

    def path(self, key: str) -> str:
        return f"{self.section}.{key}" if self.section else key


RENAMED: tuple[Renamed, ...] = (
    Renamed("", "limits", "connections"),  # what one client may hold of a listener, not a tenant's limits
    Renamed("router", "idle_timeout", "between_chunks_timeout"),
    Renamed("models[].scaling", "idle_timeout", "stop_unused_after"),
)


def new_keys(data: Any, section: str, source: str) -> Any:
    """`data` (one section's keys as read) with each of the section's renamed keys under its new name, a warning
    logged for each. Both names given: ValueError, since which one was meant is a guess."""
    if not isinstance(data, dict):
        return data
    out = data
    for r in RENAMED:
        if r.section != section or r.old not in data:
            continue
        if r.new in data:
            raise ValueError(f"{r.path(r.old)} and {r.path(r.new)} are one key (its old name and its new): give "
                             f"{r.path(r.new)} only")
        log.warning("%s: the key %s is deprecated: read as %s, its new name; rename it there", source,
                    r.path(r.old), r.path(r.new))
        out = {(r.new if k == r.old else k): v for k, v in out.items()}
    return out


class Renames(Strict):
    """A section some of whose keys were renamed (RENAMED, under this `section`)."""

    section: ClassVar[str]

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any, info: ValidationInfo) -> Any:
        context = info.context if isinstance(info.context, dict) else {}
        return new_keys(data, cls.section, str(context.get("source") or "configuration"))
