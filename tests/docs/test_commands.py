"""The docs against the program: every `llmgw` command they print exists with the options they give it (its --help
is run), and every configuration key they name exists in server.yaml's or agent.yaml's model."""

from __future__ import annotations

import re
import sys
import typing
from pathlib import Path

import pytest
import typer.main
import yaml
from pydantic import BaseModel
from typer.testing import CliRunner

from llmgw.cli.main import app
from llmgw.config.agent import AgentConfig
from llmgw.config.server import ModelSpec, ServerConfig

ROOT = Path(__file__).resolve().parents[2]
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
# where every backticked snake_case word is a configuration key, a metric, or one of these
STRICT = [ROOT / "docs" / "install.md", ROOT / "docs" / "node-onboarding.md"]
NOT_KEYS = {"llmgw_schema"}  # the store's table of schema versions


INLINE = re.compile(r"`((?:[^`\n]|\n(?!\s*\n))+)`")  # a code span may cross a line break, never a blank line


def spans(text: str) -> list[str]:
    """Inline code spans outside fenced blocks, a span broken across lines joined with a space."""
    rest = re.sub(r"```[a-z]*\n.*?```", "", text, flags=re.S)
    return [re.sub(r"\s*\n\s*", " ", m) for m in INLINE.findall(rest)]


def code_of(text: str) -> list[str]:
    """Inline code spans and the lines of fenced blocks."""
    fenced = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
    joined = [re.sub(r"\\\n\s*", " ", b) for b in fenced]  # a command continued on the next line is one command
    return spans(text) + [line for b in joined for line in b.splitlines()]


def commands() -> list[tuple[str, list[str]]]:
    """(doc, the words after `llmgw`) for every llmgw command line the docs print."""
    found = []
    for doc in DOCS:
        for code in code_of(doc.read_text()):
            code = re.sub(r"\$\([^)]*\)", "ARG", code.split(" #")[0])  # a subshell is an argument; a comment ends it
            for m in re.finditer(r"(?:^|[\s/(=$])llmgw((?:[ \t]+[^\s;|&)`]+)*)", code):
                words = [w.rstrip(",.:") for w in m.group(1).split()]
                if words and re.fullmatch(r"[a-z][a-z-]*|--[a-z-]+", words[0]):
                    found.append((doc.name, words))
    return found


def test_every_llmgw_command_the_docs_print_exists_with_its_options() -> None:
    root = typer.main.get_command(app)
    runner = CliRunner()
    checked: set[tuple[str, ...]] = set()
    problems = []
    for doc, words in commands():
        cmd: typing.Any = root
        path: list[str] = []
        rest = list(words)
        bad = False
        while hasattr(cmd, "commands"):  # a group: its options, then a subcommand
            i = 0
            while i < len(rest) and rest[i].startswith("-"):
                opt = next((p for p in cmd.params if rest[i].split("=", 1)[0] in p.opts), None)
                i += 2 if opt is not None and not getattr(opt, "is_flag", False) and "=" not in rest[i] else 1
            if i >= len(rest):
                break
            if rest[i] not in cmd.commands:
                if re.fullmatch(r"[a-z][a-z-]*", rest[i]):
                    problems.append(f"{doc}: llmgw {' '.join(words)}: no command {' '.join([*path, rest[i]])}")
                    bad = True
                break
            path.append(rest[i])
            cmd = cmd.commands[rest[i]]
            rest = rest[:i] + rest[i + 1:]
        if bad:
            continue
        known = {o for p in cmd.params for o in (*p.opts, *getattr(p, "secondary_opts", []))} | {"--help"}
        if cmd is root:
            known |= {"--version"}
        for w in rest:
            opt = w.split("=", 1)[0]
            if opt.startswith("-") and opt not in known:
                problems.append(f"{doc}: llmgw {' '.join(words)}: {' '.join(path) or 'llmgw'} has no option {opt}")
        if tuple(path) not in checked:
            checked.add(tuple(path))
            out = runner.invoke(app, [*path, "--help"])
            if out.exit_code != 0:
                problems.append(f"{doc}: llmgw {' '.join(path)} --help exited {out.exit_code}: {out.output[-500:]}")
    assert not problems, "\n".join(problems)
    assert {("ctl", "nodes", "wait"), ("ca", "issue"), ("server",), ("agent",)} <= checked  # the scan sees them


def _models_in(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) is not None:  # X | Y, Optional[X], list[X], Annotated[X, ...]
        return [m for a in typing.get_args(annotation) for m in _models_in(a)]
    return []


def key_paths() -> set[str]:
    """Every key of both configs, dotted from wherever a section begins ('router.between_chunks_timeout', and also
    'scaling.min' for a model's scaling): a doc names a key from the section it is talking about."""
    paths: set[str] = set()

    def walk(model: type[BaseModel], prefix: tuple[str, ...], seen: tuple[type[BaseModel], ...]) -> None:
        for name, f in model.model_fields.items():
            here = (*prefix, name)
            for i in range(len(here)):
                paths.add(".".join(here[i:]))
            for sub in _models_in(f.annotation):
                if sub not in seen:
                    walk(sub, here, (*seen, sub))

    walk(ServerConfig, (), (ServerConfig,))
    walk(AgentConfig, (), (AgentConfig,))
    return paths


def section_names() -> set[str]:
    """Keys whose value is itself a mapping of keys (router, store, scaling, ...), not a list of them."""
    names = set()
    for model in (ServerConfig, AgentConfig, ModelSpec):
        for name, f in model.model_fields.items():
            if typing.get_origin(f.annotation) not in (list, dict) and _models_in(f.annotation):
                names.add(name)
    return names


def test_every_config_key_the_docs_name_exists() -> None:
    keys = key_paths()
    sections = section_names()
    problems = []
    for doc in DOCS:
        text = doc.read_text()
        for s in spans(text):
            if re.fullmatch(r"[a-z_]+(\.[a-z_]+)+", s) and s.split(".")[0] in sections and s not in keys:
                problems.append(f"{doc.name}: `{s}` is no configuration key")
            if re.fullmatch(r"[a-z_]+:", s) and s[:-1] not in keys:
                problems.append(f"{doc.name}: `{s}` is no configuration key")
            if doc in STRICT and re.fullmatch(r"[a-z]+(_[a-z0-9]+)+", s) and s not in keys and s not in NOT_KEYS \
                    and not s.startswith("llmgw_"):
                problems.append(f"{doc.name}: `{s}` is no configuration key")
        for _quote, key, value in re.findall(r"--set ('|\"|)([a-z_]+)=(.*?)\1(?:\s|$)", text, re.M):
            if key not in AgentConfig.model_fields:
                problems.append(f"{doc.name}: --set {key}: agent.yaml has no such key")
            else:  # and what its value holds, at any depth
                problems += [f"{doc.name}: --set {key}: {p}" for p in _unknown_keys(yaml.safe_dump({key: yaml.safe_load(
                    value)}), only=AgentConfig)]
        for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
            problems += [f"{doc.name}: {p}" for p in _unknown_keys(block)]
    assert not problems, "\n".join(problems)


MINIMAL: dict[type[BaseModel], dict[str, object]] = {
    ServerConfig: {"tls": {"ca": "x", "cert": "x", "key": "x"}},
    ModelSpec: {"name": "m", "source": "org/m"},
    AgentConfig: {"control_planes": ["https://x:1"], "tls": {"ca": "x", "cert": "x", "key": "x"}},
}


def _unknown_keys(block: str, only: type[BaseModel] | None = None) -> list[str]:
    """Keys of a YAML fragment that neither config has (pydantic's extra_forbidden), at any depth."""
    try:
        data = yaml.safe_load(block)
    except yaml.YAMLError as e:
        return [f"a yaml block does not parse: {e}"]
    if not isinstance(data, dict):
        return []
    per_model = []
    for model, minimal in MINIMAL.items():
        if only is not None and model is not only:
            continue
        try:
            model.model_validate({**minimal, **data})
            return []
        except Exception as e:  # a ValidationError: keep only the unknown keys, not the placeholder values
            errors: list[typing.Any] = getattr(e, "errors", lambda: [])()
            per_model.append([".".join(map(str, err["loc"])) for err in errors if err["type"] == "extra_forbidden"])
    unknown = min(per_model, key=len)
    return [f"unknown key {k} in a yaml block" for k in unknown]


# ---------------------------------------------------------------------------------------------------------------
# the checks above catch what they should


# the commands the checks require every page set to show
REQUIRED = ("```sh\nllmgw ctl nodes wait gpu12 --timeout 5\nllmgw ca issue /etc/llmgw/pki gpu12\n"
            "llmgw server --check -c /etc/llmgw/server.yaml\nllmgw agent --check -c /etc/llmgw/agent.yaml\n```\n")


def _doc(tmp: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    """Point the checks above at one made-up page, to show what they catch."""
    doc = tmp / "x.md"
    doc.write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "DOCS", [doc])
    monkeypatch.setattr(sys.modules[__name__], "STRICT", [doc])


def test_the_doc_test_sees_a_subcommand_typo_after_an_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A misspelt subcommand after a group's option (`ctl nodes --json wiat`) is caught."""
    _doc(tmp_path, monkeypatch, REQUIRED + "```sh\nllmgw ctl nodes --json wiat gpu12\n```\n")
    with pytest.raises(AssertionError, match="wiat"):
        test_every_llmgw_command_the_docs_print_exists_with_its_options()


def test_the_doc_test_sees_a_command_in_a_code_span_broken_across_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command in a code span broken across lines is checked, and the spans after it pair up right."""
    _doc(tmp_path, monkeypatch, REQUIRED + "Then run `llmgw ca\nisue /etc/llmgw/pki gpu12` on the CA host.\n")
    with pytest.raises(AssertionError, match="isue"):
        test_every_llmgw_command_the_docs_print_exists_with_its_options()


def test_the_doc_test_checks_the_keys_inside_a_set_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The keys inside a `--set KEY=VALUE`'s YAML value are checked, not only KEY."""
    _doc(tmp_path, monkeypatch,
         "```sh\nscripts/onboard-node.sh gpu12 10.0.0.12 --control-plane https://cp:7443 \\\n"
         "  --set 'fabrics=[{name: ib-a, adaptors: [mlx5_0]}]'\n```\n")
    with pytest.raises(AssertionError):
        test_every_config_key_the_docs_name_exists()

