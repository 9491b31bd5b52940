"""GPUs through `nvidia-smi -q -x`, when NVML cannot be loaded from Python. It knows no NVLink topology."""

from __future__ import annotations

from llmgw.agent.discovery.commands import CommandResult, CommandRunner
from llmgw.agent.discovery.gpu_probe import GpuProbe
from llmgw.agent.discovery.gpu_smi_xml import SmiLog, SmiXmlError, parse_smi_xml

NVIDIA_SMI_QUERY = ["nvidia-smi", "-q", "-x"]
# What nvidia-smi says, exiting non-zero, on a host with the tools but no cards: plain absence.
_NO_DEVICES = "no devices were found"
# Words kept from what nvidia-smi says besides its XML: enough to explain, bounded like every report.
_LINES, _LINE = 8, 512


def _split(stdout: str) -> tuple[list[str], str]:
    """Lines said before the XML (a lost card: "Unable to determine the device handle for GPU0000:3B:00.0:
    Unknown Error"), at most a few and each bounded, and the XML itself ("" when there is none)."""
    lines = stdout.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("<")), len(lines))
    said = [line.strip()[:_LINE] for line in lines[:start] if line.strip()]
    return said[:_LINES], "".join(lines[start:])


def _exit_problem(result: CommandResult, said_before: list[str], found_cards: bool) -> tuple[str, str]:
    """Why nvidia-smi exited non-zero, and the line that said so; ("", "") for plain absence."""
    stderr = [line.strip()[:_LINE] for line in result.stderr.splitlines() if line.strip()]
    said = stderr[0] if stderr else (said_before[0] if said_before else "")
    if said and _NO_DEVICES not in said.lower():
        return f"nvidia-smi exited {result.returncode}: {said}", said
    if not said and not found_cards and _NO_DEVICES not in result.stdout.lower():
        return f"nvidia-smi exited {result.returncode} without a word", ""
    return "", ""


def probe_nvidia_smi(run: CommandRunner) -> GpuProbe:
    """source "nvidia-smi" with the cards; "none" when it is not installed or finds no card."""
    result = run(NVIDIA_SMI_QUERY)
    if result is None:
        return GpuProbe(source="none")
    said, xml = _split(result.stdout)
    said = [line for line in said if _NO_DEVICES not in line.lower()]
    log, unread = SmiLog(), []
    if xml:
        try:
            log = parse_smi_xml(xml)
        except SmiXmlError as e:
            unread = [f"nvidia-smi -q -x: {e}"]
    exit_problem, line = _exit_problem(result, said, bool(log.gpus)) if result.returncode != 0 else ("", "")
    # the exit reason says its line once, not twice
    problems = [exit_problem] if exit_problem else []
    problems += [f"nvidia-smi: {s}" for s in said if s != line] + unread
    if not log.gpus:
        return GpuProbe(source="none", problems=problems)
    return GpuProbe(source="nvidia-smi", driver=log.driver, cuda=log.cuda, gpus=log.gpus, problems=problems)
