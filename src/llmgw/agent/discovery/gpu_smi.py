"""GPUs through nvidia-smi, when NVML cannot be loaded from Python. It knows no NVLink topology."""

from __future__ import annotations

from llmgw.agent.discovery.commands import CommandRunner
from llmgw.agent.discovery.gpu_class import gpu_class
from llmgw.agent.discovery.gpu_probe import GpuProbe
from llmgw.wire.messages import GPU

NVIDIA_SMI_QUERY = [
    "nvidia-smi",
    "--query-gpu=index,name,memory.total,uuid,driver_version",
    "--format=csv,noheader,nounits",
]
# What nvidia-smi says, exiting non-zero, on a host with the tools but no cards: plain absence.
_NO_DEVICES = "no devices were found"


def parse_query_line(line: str) -> tuple[GPU, str] | None:
    """One CSV line -> (card, driver version); None for a line that is not a card (an error message)."""
    fields = [f.strip() for f in line.split(",")]
    if len(fields) < 5 or not fields[0].isdigit():
        return None
    # The name is the only field that could hold a comma; the others are fixed at both ends.
    index, name, memory, uuid, driver = fields[0], ", ".join(fields[1:-3]), fields[-3], fields[-2], fields[-1]
    memory_mib = int(memory) if memory.isdigit() else 0  # "[N/A]" on a card in trouble
    gpu = GPU(index=int(index), uuid=uuid, name=name, gpu_class=gpu_class(name, memory_mib), memory_mib=memory_mib)
    return gpu, driver


def probe_nvidia_smi(run: CommandRunner) -> GpuProbe:
    """source "nvidia-smi" with the cards; "none" when it is not installed or finds no card."""
    result = run(NVIDIA_SMI_QUERY)
    if result is None:
        return GpuProbe(source="none")
    gpus: list[GPU] = []
    driver = ""
    unparsed: list[str] = []  # e.g. "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error"
    for line in result.stdout.splitlines():
        parsed = parse_query_line(line)
        if parsed is not None:
            gpu, driver = parsed
            gpus.append(gpu)
        elif line.strip() and _NO_DEVICES not in line.lower():
            unparsed.append(line.strip())
    problems = [f"nvidia-smi: {line}" for line in unparsed]
    if result.returncode != 0:
        stderr = [line.strip() for line in result.stderr.splitlines() if line.strip()]
        said = stderr[0] if stderr else (unparsed[0] if unparsed else "")
        if said and _NO_DEVICES not in said.lower():
            # the exit reason replaces the same line seen on stdout rather than repeating it
            problems = [p for p in problems if p != f"nvidia-smi: {said}"]
            problems.insert(0, f"nvidia-smi exited {result.returncode}: {said}")
        elif not said and not gpus and _NO_DEVICES not in result.stdout.lower():
            problems.insert(0, f"nvidia-smi exited {result.returncode} without a word")
    if not gpus:
        return GpuProbe(source="none", problems=problems)
    return GpuProbe(source="nvidia-smi", driver=driver, gpus=sorted(gpus, key=lambda g: g.index), problems=problems)
