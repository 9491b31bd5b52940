"""A file of a hub model fetched from the hub itself: the token only for the hub's own host, and the hub's answers
named as what they mean (a gated repository, a commit no longer there, a hub in trouble) instead of bare statuses."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from yarl import URL

from llmgw.agent.redirects import Redirects
from llmgw.agent.transfer import Source
from llmgw.core.errors import TransferFailed
from llmgw.core.reasons import Reason
from llmgw.wire.messages import WeightsPlan

COMMIT_HEADER = "X-Repo-Commit"  # the commit a hub's answer comes from
ERROR_HEADER = "X-Error-Code"


@dataclass(frozen=True)
class Member:
    """A file of a model directory (a pinned hub source): what fetching it needs beyond its plan."""

    source: str  # hf://org/name@<commit>
    commit: str
    path: str  # inside the repository
    git_sha1: str = ""  # its git blob id, when the hub gave no sha256


def hub_name(base_url: str) -> str:
    """"the hub at huggingface.co", or with the port when it is not the scheme's own."""
    u = URL(base_url)
    return f"the hub at {u.host}" + ("" if u.is_default_port() else f":{u.port}")


def hub_source(url: str, plan: WeightsPlan, member: Member, redirects: Redirects) -> Source:
    headers = {"Authorization": f"Bearer {plan.token}"} if plan.token else {}
    name = hub_name(plan.base_url or url)
    return Source(url, name=name, redirects=redirects, headers=headers, vet=_vet(member, name, plan.token))


def _vet(m: Member, name: str, secret: str) -> Callable[[int, Mapping[str, str]], None]:
    token = bool(secret)

    def vet(status: int, headers: Mapping[str, str]) -> None:
        code = headers.get(ERROR_HEADER, "")[:8192]
        if secret:  # a hub (or proxy) echoing the token: not into words the control plane shows others
            code = code.replace(secret, "<the token>")
        code = code[:40]
        if status in (401, 403):
            has = "was refused" if token else "is not set"
            said = f"{status}, {code}" if code else str(status)
            raise TransferFailed(Reason.HubAccessDenied, f"{name} refused {m.path} ({said}):"
                                 f" the repository is gated or private, and the control plane's hub token {has}; "
                                 "accept its terms on the hub with the token's account, or set hub: token in "
                                 "server.yaml")
        if status == 404 and code == "RevisionNotFound":
            raise TransferFailed(Reason.RevisionGone, f"{name} no longer has commit {m.commit} ({m.path}: 404 "
                                 "RevisionNotFound); the control plane resolves the model again")
        if status == 404:
            raise TransferFailed(Reason.HubNotFound, f"{name} has no {m.path} at commit {m.commit} (404"
                                 f"{' ' + code if code else ''})")
        said = headers.get(COMMIT_HEADER, "")
        if said and said != m.commit:
            raise TransferFailed(Reason.RevisionGone, f"{name} answered {m.path} from commit {said[:40]}, not "
                                 f"{m.commit}: the hub no longer has commit {m.commit} as it was resolved; the "
                                 "control plane resolves the model again")
        if status >= 500 or status == 429:
            raise TransferFailed(Reason.HubUnreachable, f"{name} answered {status} for {m.path}", resumable=True)

    return vet
