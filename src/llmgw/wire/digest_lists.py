"""A release's list of assets and their digests, as GitHub's release API gives it (`assets[].name`,
`assets[].digest` = "sha256:<hex>"): read by the control plane for the whole fleet (control/nodes/release_digests.py),
or by an agent whose control plane is older. A file the list does not name, or names without a sha256, is not
installed: `DigestUnknown`, in words that name the list."""

from __future__ import annotations

import json
import os
import re
from urllib.parse import unquote, urlparse

from llmgw.core.errors import InstallRefused
from llmgw.core.reasons import Reason

LIST_MAX = 4 << 20  # llama.cpp's release, 40 assets with their uploaders, is about 100 kB
_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")


def shown(url: str) -> str:
    """A URL for a message: bounded, without credentials."""
    u = urlparse(url)
    host = u.hostname or ""
    netloc = host + (f":{u.port}" if u.port else "") if u.username or u.password else u.netloc
    return u._replace(netloc=netloc).geturl()[:200]


def file_name(url: str) -> str:
    """The file name a URL ends in, as a release lists its assets."""
    return os.path.basename(unquote(urlparse(url).path))


def listed(data: bytes, url: str) -> dict[str, str]:
    """Each asset's name and its `digest` as given ("" when it gives none), from a release's JSON."""
    try:
        release = json.loads(data)
    except (ValueError, RecursionError):
        raise InstallRefused(Reason.DigestUnknown, f"the digest list at {shown(url)} is not JSON") from None
    assets = release.get("assets") if isinstance(release, dict) else None
    if not isinstance(assets, list):
        raise InstallRefused(Reason.DigestUnknown, f"the digest list at {shown(url)} has no assets list (expected a "
                             "release as GitHub's API gives it)")
    out: dict[str, str] = {}
    for a in assets:
        if isinstance(a, dict) and isinstance(a.get("name"), str):
            digest = a.get("digest")
            out.setdefault(a["name"], digest if isinstance(digest, str) else "")
    return out


def digest_for(assets: dict[str, str], file_url: str, list_url: str) -> str:
    """The sha256 the list gives the file `file_url` names; "sha256:" and 64 lowercase hex, nothing else."""
    name = file_name(file_url)
    if name not in assets:
        raise InstallRefused(Reason.DigestUnknown, f"{name[:200]} is not among the assets the digest list at "
                             f"{shown(list_url)} names: its sha256 is unknown, so it is not installed")
    m = _DIGEST.fullmatch(assets[name])  # not match: `$` passes a newline after the hex
    if m is None:
        given = assets[name][:80] or "none"
        raise InstallRefused(Reason.DigestUnknown, f"the digest list at {shown(list_url)} gives {name[:200]} no "
                             f"sha256 (its digest: {given!r}): not installed")
    return m.group(1)
