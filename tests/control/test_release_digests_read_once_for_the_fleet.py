"""Each engine release's digest list is read by the control plane, once per period whatever the number of nodes it
answers, and the sources it sends carry the digests; what it cannot learn is sent as unknown with why (the node
passes that build over), and before its first read the sources say pending (the node waits). Pure: a fake clock, a
reader that counts."""

from __future__ import annotations

import json

from llmgw.control.nodes.release_digests import (
    MISSING_S,
    PERIOD_S,
    RETRY_FIRST_S,
    TRIES_BEFORE_UNKNOWN,
    ReleaseDigests,
)
from llmgw.core.clock import FakeClock
from llmgw.wire.engines import EngineSource, EngineVariant

API = "https://api.github.com/repos/ggml-org/llama.cpp/releases/tags/b9"
CUDA, RUNTIME = "llama-b9-bin-ubuntu-cuda-13.3-x64.tar.gz", "cudart-llama-b9.tar.gz"
CPU = "llama-b9-bin-ubuntu-x64.tar.gz"
A, B, C = "a" * 64, "b" * 64, "c" * 64


def source() -> EngineSource:
    base = "https://github.com/ggml-org/llama.cpp/releases/download/b9/"
    return EngineSource(name="llamacpp", version="b9", digests_url=API, variants=[
        EngineVariant(variant="cuda13-x86_64", cuda="13.3", url=base + CUDA, runtime_url=base + RUNTIME),
        EngineVariant(variant="cpu-x86_64", url=base + CPU)])


class Lists:
    def __init__(self, assets: dict[str, str] | None) -> None:
        self.assets, self.reads = assets, 0

    async def __call__(self, url: str) -> bytes:
        self.reads += 1
        if self.assets is None:
            raise OSError("answered 403")  # GitHub's rate limit, say
        return json.dumps({"assets": [{"name": n, "digest": d} for n, d in self.assets.items()]}).encode()


async def test_before_the_first_read_the_nodes_are_told_to_wait_and_after_it_they_get_the_digests() -> None:
    clock, lists = FakeClock(), Lists({CUDA: f"sha256:{A}", RUNTIME: f"sha256:{B}", CPU: f"sha256:{C}"})
    digests = ReleaseDigests(clock, lists)
    (pending,) = digests.fill([source()])
    assert pending.digests_pending and pending.variants == source().variants
    v0 = digests.version
    await digests.tick([source()], {"llamacpp"})
    (sent,) = digests.fill([source()])
    assert digests.version != v0 and not sent.digests_pending and sent.digests_unknown == {}
    assert [(v.sha256, v.runtime_sha256) for v in sent.variants] == [(A, B), (C, "")]

    # a thousand nodes are answered from that one read; it is read again only after its period
    for _ in range(1000):
        digests.fill([source()])
    for _ in range(10):
        clock.advance(PERIOD_S / 10 - 1)
        await digests.tick([source()], {"llamacpp"})
    assert lists.reads == 1
    clock.advance(20)
    await digests.tick([source()], {"llamacpp"})
    assert lists.reads == 2


async def test_a_file_the_list_does_not_name_is_unknown_with_why_and_the_list_is_read_again_sooner() -> None:
    clock, lists = FakeClock(), Lists({CPU: f"sha256:{C}", CUDA: f"sha256:{A}"})  # no runtime companion listed
    digests = ReleaseDigests(clock, lists)
    await digests.tick([source()], {"llamacpp"})
    (sent,) = digests.fill([source()])
    assert sent.digests_unknown == {"cuda13-x86_64": f"{RUNTIME} is not among the assets the digest list at {API} "
                                                     "names: its sha256 is unknown, so it is not installed"}
    assert [v.sha256 for v in sent.variants] == ["", C]  # the CPU build is sent whole: the node takes it, stated
    clock.advance(MISSING_S)
    await digests.tick([source()], {"llamacpp"})
    assert lists.reads == 2


async def test_a_list_that_cannot_be_read_is_retried_backing_off_then_the_builds_are_unknown() -> None:
    clock, lists = FakeClock(), Lists(None)
    digests = ReleaseDigests(clock, lists)
    waits = []
    for _ in range(TRIES_BEFORE_UNKNOWN):
        (sent,) = digests.fill([source()])
        assert sent.digests_pending, "a blip is waited out, not a fallback"
        waits.append(await digests.tick([source()], {"llamacpp"}))
        clock.advance(waits[-1])
    assert waits == [RETRY_FIRST_S, 2 * RETRY_FIRST_S, 4 * RETRY_FIRST_S]
    (sent,) = digests.fill([source()])
    assert not sent.digests_pending and set(sent.digests_unknown) == {"cuda13-x86_64", "cpu-x86_64"}
    assert sent.digests_unknown["cpu-x86_64"] == (
        f"the control plane cannot read the release's digest list at {API} (3 tries: OSError: answered 403): "
        "cpu-x86_64 is not installed without its sha256")
    lists.assets = {CUDA: f"sha256:{A}", RUNTIME: f"sha256:{B}", CPU: f"sha256:{C}"}
    clock.advance(8 * RETRY_FIRST_S)
    await digests.tick([source()], {"llamacpp"})
    (sent,) = digests.fill([source()])
    assert sent.digests_unknown == {} and sent.variants[0].sha256 == A


async def test_a_source_pinned_by_the_operator_is_never_read() -> None:
    lists = Lists({})
    digests = ReleaseDigests(FakeClock(), lists)
    pinned = EngineSource(name="llamacpp", version="b9", digests_url=API, variants=[
        EngineVariant(variant="cpu-x86_64", url="https://x/" + CPU, sha256=C)])
    await digests.tick([pinned], {"llamacpp"})
    assert lists.reads == 0 and digests.fill([pinned]) == [pinned]


async def test_a_list_no_node_needs_is_never_read() -> None:
    """Nodes that run named or simulated engines install nothing: the control plane reaches no publisher for them
    (a test cluster, or a fleet with its engines baked in, sends nothing to GitHub)."""
    lists = Lists({CPU: f"sha256:{C}"})
    digests = ReleaseDigests(FakeClock(), lists)
    await digests.tick([source()], set())
    await digests.tick([source()], {"vllm"})
    assert lists.reads == 0 and digests.fill([source()])[0].digests_pending
