"""Running a program: a one-method interface, so probes can be tested with a fake runner."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: str
    stderr: str = ""


# None means the program is not installed: for nvidia-smi that is "no NVIDIA cards", not a failure.
CommandRunner = Callable[[Sequence[str]], CommandResult | None]


def run_command(argv: Sequence[str], timeout_s: float = 15.0) -> CommandResult | None:
    """The real runner. A hung nvidia-smi (a GPU off the bus can do that) must not hang discovery."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        return None
    except subprocess.TimeoutExpired:
        return CommandResult(returncode=124, stdout="", stderr=f"{argv[0]}: no answer after {timeout_s:g} s")
    except OSError as e:
        return CommandResult(returncode=126, stdout="", stderr=f"{argv[0]}: {e.strerror or e}")
    return CommandResult(returncode=done.returncode, stdout=done.stdout, stderr=done.stderr)
