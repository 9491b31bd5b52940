"""The exception tree of llmgw.

LlmgwError
├── ConfigError          a config file is invalid; message names file and key path
├── StoreError           the store could not read or write
├── PKIError             certificate authority problems
├── DiscoveryError       a probe failed in a way that is not "absent hardware"
├── EngineError          an engine adapter cannot build or check a command
│   └── InstallRefused   an engine build was not installed: a bad digest, an escaping archive, a missing library
├── TransferFailed       a file did not arrive whole: a cut connection (resumable), a wrong size, a full disk
│   └── WeightsRefused   a model's weights cannot be had on this node: a bad digest, no room, no source
├── RendezvousError      (sim) a multi-node group could not form or broke
└── UpstreamError        a peer did not answer as it should: an engine (router), a control plane (agent)
    ├── ConnectFailed    never reached the engine: safe to retry elsewhere
    ├── StreamBroken     failed after bytes were exchanged: never retried
    └── ControlPlaneUnreachable   the agent reached no control plane: it keeps serving what it runs

Foreign exceptions (aiohttp, sqlite3, pydantic, OSError) are translated at module boundaries.
"""

from __future__ import annotations

import errno

from llmgw.core.reasons import Reason


class LlmgwError(Exception):
    pass


class ConfigError(LlmgwError):
    def __init__(self, file: str, problems: list[str]) -> None:
        self.file = file
        self.problems = problems
        super().__init__("\n".join(f"{file}: {p}" for p in problems))


class StoreError(LlmgwError):
    pass


class StoreRejected(LlmgwError):
    """The database refused a write for what it holds (a value it cannot store): retrying it cannot land, so it is
    not a StoreError (those are retried until the store is back)."""


class Deposed(LlmgwError):
    """A write only the leading control plane may make, by one that no longer leads: the store refused it (its
    fencing epoch is not the lease's). Not a store failure: retrying it can never land."""


class AlreadyCharged(Deposed):
    """A chargeback step found its window charged by another step since it read the mark (store/chargeback_sql):
    nothing was written."""


class PKIError(LlmgwError):
    pass


class DiscoveryError(LlmgwError):
    pass


class EngineError(LlmgwError):
    pass


class InstallRefused(EngineError):
    """`reason` is a code (Reason), the message the node's own words; nothing outside the install directory was
    written and any previous install is untouched."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)

    @classmethod
    def from_os(cls, e: OSError, what: str, otherwise: str = Reason.EngineInstallFailed) -> InstallRefused:
        """A failed write in the words of the system: a full disk is DiskFull, anything else `otherwise`."""
        return cls(Reason.DiskFull if e.errno == errno.ENOSPC else otherwise, f"{what}: {e.strerror or e}")


class TransferFailed(LlmgwError):
    """`reason` a code (Reason), the message the node's words; `resumable`: what arrived is kept and the next
    attempt continues from it."""

    def __init__(self, reason: str, message: str, resumable: bool = False) -> None:
        self.reason = reason
        self.resumable = resumable
        super().__init__(message)

    @classmethod
    def from_os(cls, e: OSError, what: str) -> TransferFailed:
        return cls(Reason.DiskFull if e.errno == errno.ENOSPC else Reason.DownloadFailed,
                   f"{what}: {e.strerror or e}")


class WeightsRefused(TransferFailed):
    pass


class HubFailed(LlmgwError):
    """The hub (or its mirror) could not resolve a model's revision: `reason` a code (HubUnreachable,
    HubAccessDenied, HubNotFound, NoWeightsFiles), the message the hub's words with what to do."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


class UpstreamError(LlmgwError):
    pass


class ConnectFailed(UpstreamError):
    pass


class StreamBroken(UpstreamError):
    """The engine failed after the request reached it: never retried (it may have done the work, and a client may
    have part of the answer). `status` is what to record and answer (502, 504); `seen` the tokens counted so far;
    `answered` the response already begun to the client, if one was (its end says what broke), else None."""

    def __init__(self, message: str, *, status: int = 502, seen: tuple[int, int] = (0, 0),
                 answered: object | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.seen = seen
        self.answered = answered


class ControlPlaneUnreachable(UpstreamError):
    pass


class ClientGone(LlmgwError):
    """The client that sent a request went away while it was being answered: what was sent on for it is given up
    (the engine, told by its connection closing, stops generating)."""
