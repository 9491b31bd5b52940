"""Each scorer and the decision rule, on snapshots (no I/O): load, prefix affinity, the margin, and the reasons."""

from __future__ import annotations

from llmgw.router.prefix import PrefixIndex, chain, prompt_text
from llmgw.router.scoring import LEAST_LOADED, PREFIX, ReplicaCandidate, RouteReason, Weights, choose


def test_least_loaded_takes_the_replica_with_the_least_work_counting_the_engines_own_gauges() -> None:
    cands = [ReplicaCandidate("a", in_flight=3), ReplicaCandidate("b", in_flight=1, running=5.0),
             ReplicaCandidate("c", in_flight=2)]
    d = choose(cands, 0, LEAST_LOADED)
    assert (d.replica_id, d.reason) == ("c", RouteReason.LeastLoaded)  # b runs 5, whoever sent them
    assert [s.load for s in d.scores] == [3.0, 5.0, 2.0]
    queued = [ReplicaCandidate("a", in_flight=1), ReplicaCandidate("b", in_flight=1, waiting=3.0)]
    assert choose(queued, 0, LEAST_LOADED).replica_id == "a"  # b's engine queues three more
    tie = [ReplicaCandidate("a", in_flight=1), ReplicaCandidate("b", in_flight=1)]
    assert choose(tie, 0, LEAST_LOADED).replica_id == "a"  # ties go to the first listed


def test_prefix_prefers_the_longest_match_within_the_margin() -> None:
    cands = [ReplicaCandidate("a", in_flight=0), ReplicaCandidate("b", in_flight=2, matched_blocks=8),
             ReplicaCandidate("c", in_flight=1, matched_blocks=3)]
    d = choose(cands, 10, PREFIX)
    assert (d.replica_id, d.reason, d.matched_blocks) == ("b", RouteReason.PrefixHit, 8)
    assert choose(cands, 10, LEAST_LOADED).replica_id == "a"  # the policy that does not look


def test_a_prefix_is_not_worth_a_queue_past_the_margin() -> None:
    w = Weights(load=1.0, prefix=2.0, margin=4.0)
    cands = [ReplicaCandidate("a", in_flight=0), ReplicaCandidate("b", in_flight=5, matched_blocks=10)]
    d = choose(cands, 10, w)
    assert (d.replica_id, d.reason) == ("a", RouteReason.PrefixOverloaded)
    assert not d.scores[1].eligible
    within = [ReplicaCandidate("a", in_flight=0), ReplicaCandidate("b", in_flight=4, matched_blocks=10)]
    assert choose(within, 10, w).replica_id == "b"


def test_prompts_no_replica_holds_spread_over_equally_loaded_replicas_each_to_its_own_home() -> None:
    idle = [ReplicaCandidate(r) for r in "abcd"]
    homes = [chain("m", f"system prompt number {i} " * 10, 64)[0] for i in range(200)]
    chosen = [choose(idle, 4, PREFIX, h).replica_id for h in homes]
    counts = {r: chosen.count(r) for r in "abcd"}
    assert all(30 <= n <= 70 for n in counts.values()), counts  # 50 each on average, not 200 on "a"
    assert [choose(idle, 4, PREFIX, h).replica_id for h in homes] == chosen  # the same prompt, the same home
    assert [choose(idle[::-1], 4, PREFIX, h).replica_id for h in homes] == chosen  # whatever the order listed
    home = chosen[0]
    busier = [ReplicaCandidate(r, in_flight=1 if r == home else 0) for r in "abcd"]
    assert choose(busier, 4, PREFIX, homes[0]).replica_id != home  # only a tie-break: load comes first
    assert choose(idle, 4, LEAST_LOADED, homes[0]).replica_id == "a"  # least_loaded: first listed, as before


def test_a_prefix_holder_with_every_slot_busy_loses_to_a_free_replica() -> None:
    """llama-server runs as many requests as it has slots and queues the rest: behind a 1.4 s prefill, a cache hit
    is worth less than a free slot elsewhere (bench/routing_llama.py measured 1.16x least-loaded's time to first
    token before this rule, with two clients on two one-slot replicas)."""
    full = [ReplicaCandidate("a", in_flight=0, slots=1), ReplicaCandidate("b", in_flight=1, matched_blocks=10, slots=1)]
    d = choose(full, 10, PREFIX)
    assert (d.replica_id, d.reason) == ("a", RouteReason.PrefixOverloaded)
    free = [ReplicaCandidate("a", in_flight=0, slots=4), ReplicaCandidate("b", in_flight=1, matched_blocks=10, slots=4)]
    assert choose(free, 10, PREFIX).replica_id == "b"  # a slot left: the hit wins, within the margin
    batched = [ReplicaCandidate("a", in_flight=0), ReplicaCandidate("b", in_flight=1, matched_blocks=10)]
    assert choose(batched, 10, PREFIX).replica_id == "b"  # no fixed slots (vLLM): the margin alone
    all_full = [ReplicaCandidate("a", in_flight=1, slots=1),
                ReplicaCandidate("b", in_flight=1, matched_blocks=10, slots=1)]
    assert choose(all_full, 10, PREFIX).replica_id == "b"  # every one queues: then the hit is worth it


def test_no_match_anywhere_is_least_loaded_and_no_replica_is_said() -> None:
    d = choose([ReplicaCandidate("a", in_flight=2), ReplicaCandidate("b", in_flight=1)], 6, PREFIX)
    assert (d.replica_id, d.reason) == ("b", RouteReason.LeastLoaded)
    assert choose([], 6, PREFIX).reason == RouteReason.NoReplica


def test_the_prompt_is_read_from_messages_or_prompt_and_bounded() -> None:
    chat = {"messages": [{"role": "system", "content": "S" * 10},
                         {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url"}]},
                         "junk", {"role": 7, "content": None}]}
    assert prompt_text(chat, 1000) == "<system>" + "S" * 10 + "<user>hi<>"
    assert prompt_text({"prompt": "abc"}, 1000) == "abc"
    assert prompt_text({"prompt": ["first", "second"]}, 1000) == "first"
    assert prompt_text({"prompt": 42}, 1000) == ""
    assert len(prompt_text({"prompt": "x" * 10_000}, 256)) == 256


def test_prefix_keys_name_whole_prefixes_per_model() -> None:
    a = chain("m", "A" * 100 + "B" * 100, 50)
    b = chain("m", "A" * 100 + "C" * 100, 50)
    assert len(a) == 4 and a[:2] == b[:2] and a[2] != b[2]
    assert chain("other", "A" * 100, 50) != a[:2]  # another model's cache is another cache
    assert chain("m", "A" * 49, 50) == []  # no complete block


def test_the_index_remembers_who_was_sent_what_and_forgets_the_oldest() -> None:
    idx = PrefixIndex(entries=6)
    sys_a = chain("m", "A" * 200, 50)  # 4 blocks
    idx.record(sys_a, "r1")
    req = chain("m", "A" * 200 + "q" * 100, 50)  # the same 4, and 2 more
    assert idx.matches(req) == {"r1": 4}
    idx.record(req, "r2")
    assert idx.matches(req) == {"r1": 4, "r2": 6}  # r1 still holds the first four
    assert len(idx) == 6
    idx.record(chain("m", "Z" * 100, 50), "r3")  # two new keys push out the two oldest
    assert len(idx) == 6
    assert idx.matches(req) == {"r1": 4, "r2": 6}  # the oldest were refreshed by r2's record
    for r in ("r4", "r5", "r6", "r7"):
        idx.record(sys_a, r)
    assert idx.matches(sys_a) == {"r7": 4, "r6": 4, "r5": 4, "r4": 4}  # four holders at most: the latest
