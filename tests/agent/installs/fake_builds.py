"""Fast stand-in builds: a llama-server that is a shell script (ldd calls it "not a dynamic executable", so
only the version and help checks decide), optionally slow or failing while a flag file exists."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from llmgw.agent.installs.engine_check import flags_of


def fake_server_script(slow_flag: Path | None = None, fail_flag: Path | None = None) -> bytes:
    flags = "\n".join(f"  {f} X   something" for f in flags_of("llamacpp", multi_node=True))
    filler = "\n".join(f"  --filler-{i}" for i in range(600))
    s = "#!/bin/sh\n"
    if slow_flag is not None:
        s += f'[ -e "{slow_flag}" ] && sleep "$(cat {slow_flag})"\n'
    if fail_flag is not None:
        s += f'[ -e "{fail_flag}" ] && {{ echo "error while loading shared libraries: transient" >&2; exit 127; }}\n'
    s += 'case "$1" in --version) echo "version: 4242 (fake)";; *) cat <<HELP\n'
    s += flags + "\n" + filler + "\nHELP\n;; esac\n"
    return s.encode()


def fake_archive(version: str, script: bytes, pad: int = 0) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        d = tarfile.TarInfo(f"llama-{version}")
        d.type, d.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(d)
        f = tarfile.TarInfo(f"llama-{version}/llama-server")
        f.size, f.mode = len(script), 0o755
        tar.addfile(f, io.BytesIO(script))
        if pad:
            import os
            filler = tarfile.TarInfo(f"llama-{version}/pad.bin")
            filler.size = pad
            tar.addfile(filler, io.BytesIO(os.urandom(pad)))
    return buf.getvalue()
