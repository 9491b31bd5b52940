"""Host roots for simulated nodes: the files a probe would read under /proc, /sys and /etc, written to a directory."""

from __future__ import annotations

from pathlib import Path

import yaml

CPUINFO_CORE = """processor\t: {i}
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov sse sse2 ssse3 fma cx16 sse4_1 sse4_2 \
avx f16c avx2 avx512f amx_tile

"""


def write_sim_host(
    root: Path,
    *,
    mem_gib: int = 2048,
    gpus: int = 8,
    gpu_name: str = "NVIDIA H100 80GB HBM3",
    memory_mib: int = 81559,
    adapters: dict[str, str] | None = None,  # name -> port state, e.g. {"mlx5_0": "ACTIVE"}
    faulty: dict[int, str] | None = None,
    nvlink: str = "all",  # all | pairs | unknown
    avx2: bool = True,
    driver: str = "550.54.15",  # the NVIDIA driver the inventory names, and the newest CUDA it runs
    cuda: str = "12.4",
    glibc: str = "2.39",  # the C library a prebuilt engine is matched against ("": none that says its version)
    arch: str = "",  # the kernel's name for the processor ("aarch64"); "": the agent's own
) -> Path:
    """Write a simulated host root and its GPU inventory; returns the inventory path."""
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "etc").mkdir(parents=True, exist_ok=True)
    kib = mem_gib * 1024 * 1024
    (root / "proc" / "meminfo").write_text(f"MemTotal:       {kib} kB\nMemAvailable:   {kib * 9 // 10} kB\n")
    cpuinfo = "".join(CPUINFO_CORE.format(i=i) for i in range(4))
    if not avx2:  # a VM CPU type that hides it (AVX-512 and AMX go with it)
        cpuinfo = cpuinfo.replace(" avx2 avx512f amx_tile", "")
    (root / "proc" / "cpuinfo").write_text(cpuinfo)
    (root / "etc" / "os-release").write_text('PRETTY_NAME="Ubuntu 24.04.1 LTS (simulated)"\n')
    if glibc:  # glibc's banner, as the library carries it (discovery reads it, never runs it)
        lib = root / "lib" / "x86_64-linux-gnu"
        lib.mkdir(parents=True, exist_ok=True)
        (lib / "libc.so.6").write_text(f"GNU C Library (simulated GLIBC {glibc}) stable release version {glibc}.\n")
    if arch:
        (root / "proc" / "sys" / "kernel").mkdir(parents=True, exist_ok=True)
        (root / "proc" / "sys" / "kernel" / "arch").write_text(arch + "\n")
    codes = {"ACTIVE": 4, "INIT": 2, "DOWN": 1}
    for name, state in (adapters or {}).items():
        port = root / "sys" / "class" / "infiniband" / name / "ports" / "1"
        port.mkdir(parents=True, exist_ok=True)
        (port / "state").write_text(f"{codes.get(state, 1)}: {state}\n")
        (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
    cards = []
    for i in range(gpus):
        card: dict[str, object] = {"index": i, "name": gpu_name, "memory_mib": memory_mib, "uuid": f"GPU-sim-{i}"}
        if nvlink == "all":
            card["nvlink_peers"] = [j for j in range(gpus) if j != i]
        elif nvlink == "pairs":
            card["nvlink_peers"] = [i ^ 1]
        if faulty and i in faulty:
            card["fault"] = faulty[i]
        cards.append(card)
    inv = root / "gpu-inventory.yaml"
    inv.write_text(yaml.safe_dump({"driver": driver, "cuda": cuda, "gpus": cards}, sort_keys=False))
    return inv
