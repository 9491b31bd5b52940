"""The control plane's owners, declared once. Each owns its state and changes it only through its own operations;
another owner's changes go through that owner's named operations.

plane.py builds them (tests/control/test_owners.py holds that it builds exactly these, each of its module's class);
tests/test_import_rules.py holds that no module but an owner's own writes its state, reading the names here; and
docs/architecture.md's table of owners says the same as this one (tests/docs/test_architecture_map.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Owner:
    name: str  # the attribute a reference to it goes by: plane.registry, self._registry, limit_counters.gpu
    module: str  # the one module that writes its state, under control/
    holds: str  # what it holds, in words
    within: str = ""  # the owner that builds and holds it ("": the plane)

    @property
    def path(self) -> str:
        """How the plane reaches it: "registry", "limit_counters.gpu"."""
        return f"{self.within}.{self.name}" if self.within else self.name


OWNERS: tuple[Owner, ...] = (
    Owner("storage", "storage/storage.py", "the store, its writer, whether it is shared, since when reads fail"),
    Owner("leadership", "storage/leadership.py",
          "this server's part in the lease: the lease as the store last answered, the fencing epoch while it leads"),
    Owner("registry", "nodes/registry.py",
          "the catalog, nodes, replicas, the generation; applies a pass's effects"),
    Owner("watch", "nodes/watch.py", "agents waiting to hear that the shards they are to run changed",
          within="registry"),
    Owner("heartbeats", "nodes/heartbeats.py",
          "a node's report in, its desired state out; renewals; a node's event budget"),
    Owner("renewal_tokens", "nodes/renewal_tokens.py",
          "the token each node's last report was answered with, and each node's desired state kept",
          within="heartbeats"),
    Owner("fetch_leaders", "nodes/fetch_leaders.py",
          "who fetches each remote file from its origin, per fabric (soft: chosen again after a restart)",
          within="heartbeats"),
    Owner("passes", "nodes/passes.py", "the reconcile pass: its count, its stall detection"),
    Owner("kick", "nodes/kick.py",
          "whether a pass is worth running before the next interval: owners ask with kick(), the loop takes it",
          within="passes"),
    Owner("ready_times", "nodes/ready_times.py",
          "how long each way to ready (a wake, a load) took, per model, engine and GPU class"),
    Owner("sleep_refusals", "nodes/sleep_refusals.py",
          "nodes where an engine refused sleep mode, so it runs there without"),
    Owner("release_digests", "nodes/release_digests.py",
          "each engine release's digest list as last read for the fleet, when each is read again, failed reads"),
    Owner("activity", "activity/activity.py",
          "what routers saw: demand, last use, requests in flight, engine loads, router stats"),
    Owner("recent", "activity/recent_requests.py",
          "requests per replica lately, halving every half-life: what preempting a replica costs", within="activity"),
    Owner("credentials", "tenants/credentials.py",
          "API keys (their cache and lock) and revoked nodes and certificates"),
    Owner("limit_counters", "tenants/limit_counters.py",
          "every key's counters against its limits, and admissions' tickets"),
    Owner("gpu", "tenants/gpu_budgets.py",
          "every key's budgets in GPU-seconds or money: held in flight, charged, settled since the mark; models' speed",
          within="limit_counters"),
    Owner("usage", "tenants/usage_totals.py", "usage totals by key and model, all time and by the hour"),
    Owner("following", "ha/following.py",
          "the lease, following the shared store, sharing activity with other servers"),
    Owner("hub_models", "hub/hub_models.py",
          "per `hf://` model of the catalog: its resolution (a commit and its files, sticky) or why none; its retries"),
    Owner("chargeback", "chargeback/chargeback.py",
          "on the leader: each replica's span on its GPUs, sampled from the registry; the chargeback mark and the "
          "usage records still in flight past it; charges each settled window once (`chargeback/`)"),
    Owner("charge_book", "chargeback/charge_book.py",
          "the last day's GPU time and cost per key as the views show it, read from the store at most once a refresh"),
)
