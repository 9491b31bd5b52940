"""The hub models' owner: a revision resolved once and kept (sticky), resolved again when the catalog names another
source or nodes report the commit gone, with back-off while the hub fails, the token read from its file."""

from __future__ import annotations

import asyncio
from pathlib import Path

from llmgw.config.server import HubConfig, ModelSpec
from llmgw.control.hub.hub_models import RETRY_BASE, HubModels, read_token
from llmgw.core.clock import FakeClock
from llmgw.core.errors import HubFailed
from llmgw.core.reasons import Reason
from llmgw.store.sqlite import SqliteStore
from llmgw.wire.hub import HubFile, HubRef, Resolution
from llmgw.wire.messages import FetchStatus
from tests.clusters import model, node

SRC = "hf://org/m@main"
C1, C2 = "1" * 40, "2" * 40


class Hub:
    """A resolver standing in for the hub: answers the commit `head` names, or raises `failing`."""

    def __init__(self) -> None:
        self.head = C1
        self.gated = False
        self.failing: HubFailed | None = None
        self.calls: list[tuple[HubRef, str | None]] = []

    def __call__(self, ref: HubRef, endpoint: str, token: str | None, timeout: float) -> Resolution:
        self.calls.append((ref, token))
        if self.failing is not None:
            raise self.failing
        commit = ref.revision if ref.pinned else self.head
        files = (HubFile(path="model.safetensors", size=1000), HubFile(path="config.json", size=10))
        return Resolution(ref.repo, ref.revision, commit, files, gated=self.gated)


def catalog(source: str = SRC) -> dict[str, ModelSpec]:
    return {"m": model(source=source, gpus_per_shard=0, cls=None), "other": model(name="other")}


def owner(hub: Hub, clock: FakeClock, token_file: Path | None = None) -> HubModels:
    cfg = HubConfig(endpoint="http://127.0.0.1:9/mirror", token_file=str(token_file) if token_file else None)
    return HubModels(cfg, clock, hub)


def test_resolving_until_the_first_answer_then_pinned_and_sticky() -> None:
    hub, clock = Hub(), FakeClock()
    o = owner(hub, clock)
    models = catalog()
    assert o.unresolved(models)["m"][0] == Reason.HubResolving
    assert set(o.unresolved(models)) == {"m"}, "only hub models resolve"
    asyncio.run(o.tick(models))
    assert o.states["m"].resolution is not None and o.states["m"].resolution.commit == C1
    assert o.pinned(models)["m"].source == f"hf://org/m@{C1}"
    assert o.pinned(models)["other"] == models["other"]
    hub.head = C2  # the branch moves on the hub: nothing served changes
    clock.advance(3600)
    asyncio.run(o.tick(models))
    assert len(hub.calls) == 1 and o.pinned(models)["m"].source.endswith(C1)
    assert not o.unresolved(models)


def test_another_source_in_the_catalog_is_resolved_again() -> None:
    hub, clock = Hub(), FakeClock()
    o = owner(hub, clock)
    asyncio.run(o.tick(catalog()))
    hub.head = C2
    asyncio.run(o.tick(catalog("hf://org/m@v2")))
    assert [c[0].revision for c in hub.calls] == ["main", "v2"]
    assert o.pinned(catalog("hf://org/m@v2"))["m"].source == f"hf://org/m@{C2}"


def test_a_commit_reported_gone_is_resolved_again_once() -> None:
    hub, clock = Hub(), FakeClock()
    o = owner(hub, clock)
    asyncio.run(o.tick(catalog()))
    clock.advance(RETRY_BASE)
    n = node("n1")
    other = FetchStatus(source=f"hf://org/m@{C1}", state="failed", reason="WeightsUnusable")
    o.revision_gone(n.report.model_copy(update={"fetches": [other]}))
    assert o.states["m"].resolution is not None, "another failure is not the commit gone"
    gone = FetchStatus(source=f"hf://org/m@{C1}", state="failed", reason=Reason.RevisionGone)
    report = n.report.model_copy(update={"fetches": [gone]})
    o.revision_gone(report)
    assert o.states["m"].reason == Reason.HubResolving and C1 in o.states["m"].message
    assert o.wake.is_set()
    assert o.unresolved(catalog())["m"][0] == Reason.HubResolving, "no new replica is placed meanwhile"
    assert o.pinned(catalog())["m"].source.endswith(C1), "running replicas keep their commit until there is another"
    assert set(o.plans()) == {f"hf://org/m@{C1}"}
    hub.head = C2
    asyncio.run(o.tick(catalog()))
    assert o.pinned(catalog())["m"].source.endswith(C2) and set(o.plans()) == {f"hf://org/m@{C2}"}
    o.revision_gone(report)  # the node still reports the old commit's failure: that is not the new one gone
    assert o.states["m"].resolution is not None and len(hub.calls) == 2


def test_failures_back_off_doubling_and_keep_the_hubs_words() -> None:
    hub, clock = Hub(), FakeClock()
    hub.failing = HubFailed(Reason.HubUnreachable, "the hub did not answer in 30 s")
    o = owner(hub, clock)
    assert asyncio.run(o.tick(catalog())) == RETRY_BASE
    st = o.states["m"]
    assert st.reason == Reason.HubUnreachable and st.message == f"{SRC}: the hub did not answer in 30 s"
    assert o.unresolved(catalog())["m"] == (Reason.HubUnreachable, st.message)
    asyncio.run(o.tick(catalog()))
    assert len(hub.calls) == 1, "not due yet"
    clock.advance(RETRY_BASE)
    assert asyncio.run(o.tick(catalog())) == 2 * RETRY_BASE
    assert len(hub.calls) == 2
    hub.failing = None
    clock.advance(2 * RETRY_BASE)
    asyncio.run(o.tick(catalog()))
    assert o.states["m"].resolution is not None and not o.states["m"].reason


def test_a_pinned_revision_is_still_asked_for_its_files() -> None:
    hub, clock = Hub(), FakeClock()
    o = owner(hub, clock)
    asyncio.run(o.tick(catalog(f"hf://org/m@{C2}")))
    assert len(hub.calls) == 1 and o.plans()[f"hf://org/m@{C2}"].size == 1010


def test_the_token_goes_to_the_hub_and_only_into_plans_of_gated_repositories(tmp_path: Path) -> None:
    tok = tmp_path / "token"
    tok.write_text("hf_secret\n")
    tok.chmod(0o600)
    hub, clock = Hub(), FakeClock()
    o = owner(hub, clock, tok)
    asyncio.run(o.tick(catalog()))
    assert hub.calls[0][1] == "hf_secret"
    plan = o.plans()[f"hf://org/m@{C1}"]
    assert plan.token == "" and plan.base_url == f"http://127.0.0.1:9/mirror/org/m/resolve/{C1}"
    assert [f.path for f in plan.files] == ["model.safetensors", "config.json"]
    hub.gated = True
    asyncio.run(o.tick(catalog("hf://org/m@v2")))
    assert o.plans()[f"hf://org/m@{C1}"].token == "hf_secret"


def test_a_token_file_others_can_read_is_not_used_and_a_denial_says_so(tmp_path: Path) -> None:
    tok = tmp_path / "token"
    tok.write_text("hf_secret\n")
    tok.chmod(0o644)
    assert read_token(tok) == (None, f"the hub token file {tok} is readable by others (mode 644): chmod 600 it")
    hub, clock = Hub(), FakeClock()
    hub.failing = HubFailed(Reason.HubAccessDenied, "the hub answered 401 (gated repository)")
    o = owner(hub, clock, tok)
    asyncio.run(o.tick(catalog()))
    assert hub.calls[0][1] is None
    st = o.states["m"]
    assert st.reason == Reason.HubAccessDenied and "chmod 600" in st.message and "401" in st.message


def test_token_files_that_hold_no_token_are_refused(tmp_path: Path) -> None:
    tok = tmp_path / "token"
    for body in (b"", b"a b\n", b"x" * 5000):
        tok.write_bytes(body)
        tok.chmod(0o600)
        assert read_token(tok)[0] is None
    assert read_token(tmp_path / "absent")[1].startswith("cannot read the hub token file")
    assert read_token(None) == (None, "no hub.token_file is configured")


def test_servers_sharing_a_store_use_the_first_commit_and_a_restart_asks_the_hub_nothing(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db").open()
    clock = FakeClock()
    first, second = Hub(), Hub()
    second.head = C2  # the branch moved between the two servers' questions
    a = HubModels(HubConfig(), clock, first, store)
    b = HubModels(HubConfig(), clock, second, store)
    asyncio.run(a.tick(catalog()))
    asyncio.run(b.tick(catalog()))
    assert a.pinned(catalog())["m"].source == b.pinned(catalog())["m"].source == f"hf://org/m@{C1}"
    restarted, hub = HubModels(HubConfig(), clock, Hub(), store), Hub()
    restarted._resolve = hub
    asyncio.run(restarted.tick(catalog()))
    assert hub.calls == [] and restarted.pinned(catalog())["m"].source.endswith(C1)


def test_a_commit_gone_is_dropped_from_the_store_and_every_server_moves_to_the_new_one(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db").open()
    clock, hub = FakeClock(), Hub()
    a, b = HubModels(HubConfig(), clock, hub, store), HubModels(HubConfig(), clock, hub, store)
    asyncio.run(a.tick(catalog()))
    asyncio.run(b.tick(catalog()))
    clock.advance(RETRY_BASE)
    hub.head = C2
    gone = node("n1").report.model_copy(update={"fetches": [
        FetchStatus(source=f"hf://org/m@{C1}", state="failed", reason=Reason.RevisionGone)]})
    a.revision_gone(gone)
    asyncio.run(a.tick(catalog()))
    b.revision_gone(gone)  # told later, by another node
    asyncio.run(b.tick(catalog()))
    assert a.pinned(catalog())["m"].source == b.pinned(catalog())["m"].source == f"hf://org/m@{C2}"
    assert len(hub.calls) == 2, "the first resolution and a's second; b read both from the store"


def test_a_store_that_fails_is_a_retry_with_its_words(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db").open()
    store.close()
    o = HubModels(HubConfig(), FakeClock(), Hub(), store)
    assert asyncio.run(o.tick(catalog())) == RETRY_BASE
    assert o.states["m"].reason == Reason.HubResolving and "the store" in o.states["m"].message


def test_a_token_replaced_or_removed_reaches_the_plans_without_resolving_again(tmp_path: Path) -> None:
    tok = tmp_path / "token"
    tok.write_text("hf_old\n")
    tok.chmod(0o600)
    hub, clock = Hub(), FakeClock()
    hub.gated = True
    o = owner(hub, clock, tok)
    asyncio.run(o.tick(catalog()))
    assert o.plans()[f"hf://org/m@{C1}"].token == "hf_old"
    tok.write_text("hf_new\n")  # the old one leaked and was revoked on the hub
    clock.advance(10)
    asyncio.run(o.tick(catalog()))
    assert o.plans()[f"hf://org/m@{C1}"].token == "hf_new" and len(hub.calls) == 1
    tok.unlink()
    asyncio.run(o.tick(catalog()))
    assert o.plans()[f"hf://org/m@{C1}"].token == ""
