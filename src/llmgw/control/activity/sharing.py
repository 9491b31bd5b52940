"""What a server's routers saw, shared through the store when several servers share one: for the leader, demand for
models (a load asked for through a follower), replicas used (idle eviction must not take a replica busy through
another server) and requests in flight; for every server, each key's use against its limits
(control/tenants/limit_counters.py). Each server writes its own rows and reads the others'. Pure bookkeeping over the
plane's tables: the plane applies what comes out."""

from __future__ import annotations

from dataclasses import dataclass, field

SERVER = "server "  # the reporter name, in the leader's in-flight table, of another server's routers
Row = tuple[str, str, float, int]  # (kind, name, at, n)


# a key's requests, tokens (net of what settling gave back) and tokens spent, admitted here so far; its requests in
# flight and the tokens they hold now; the GPU milliseconds and money millionths its requests hold or settled since the
# chargeback's mark (control/tenants/gpu_budgets.py)
KEY_KINDS = ("kreq", "ktok", "kspd", "kinf", "kres", "kgpu", "kcst")
# counts of now: written every pass while not 0 (their time says they are now)
SHARED = ("kinf", "kres", "kgpu", "kcst", "inflight")


@dataclass
class Others:
    demand: dict[str, float] = field(default_factory=dict)
    used: dict[str, float] = field(default_factory=dict)
    in_flight: dict[str, dict[str, int]] = field(default_factory=dict)  # reporter name -> replica -> requests
    heard: dict[str, float] = field(default_factory=dict)  # reporter name -> when its newest in-flight row was written
    keys: list[tuple[str, str, str, float, int]] = field(default_factory=list)  # (server, kind, key, at, n)


@dataclass
class Sharing:
    written: dict[tuple[str, str], tuple[float, int]] = field(default_factory=dict)  # what this server last wrote
    merged: dict[tuple[str, str, str], float] = field(default_factory=dict)  # (server, kind, name) -> at merged

    def rows(self, demand: dict[str, float], used: dict[str, float], own: dict[str, int], now: float,
             keys: dict[tuple[str, str], int] | None = None) -> list[Row]:
        """This server's rows that changed since it last wrote them; counts of now (requests in flight, a key's
        requests in flight and tokens held) every time while not 0 (their time says they are current: a server that
        stops writing them stops counting). `keys`: (kind, key id) -> n, of KEY_KINDS."""
        out: list[Row] = []
        for kind, table in (("demand", demand), ("used", used)):
            for name, at in table.items():
                if self.written.get((kind, name)) != (at, 0):
                    out.append((kind, name, at, 0))
        counts: dict[tuple[str, str], int] = {("inflight", name): n for name, n in own.items()}
        counts.update(keys or {})
        for (kind, name), n in counts.items():
            if (kind in SHARED and n) or self.written.get((kind, name), (0.0, 0))[1] != n:
                out.append((kind, name, now, n))
        for (kind, name), (_, n) in self.written.items():
            if kind in SHARED and n and (kind, name) not in counts:
                out.append((kind, name, now, 0))
        for kind, name, at, n in out:
            self.written[(kind, name)] = (at, n)
        return out

    def others(self, rows: list[tuple[str, str, str, float, int]], me: str, now: float, fresh: float) -> Others:
        """What the other servers wrote that is new to this one; in flight only from rows at most `fresh` old."""
        got = Others()
        for server, kind, name, at, n in rows:
            if server == me:
                continue
            if kind in KEY_KINDS:
                got.keys.append((server, kind, name, at, n))
                continue
            if kind == "inflight":
                if now - at <= fresh:
                    got.heard[SERVER + server] = max(at, got.heard.get(SERVER + server, at))
                    counts = got.in_flight.setdefault(SERVER + server, {})
                    if n > 0:
                        counts[name] = n
                continue
            if self.merged.get((server, kind, name), -1.0) >= at:
                continue  # merged already: a demand met since must not come back from the same old row
            self.merged[(server, kind, name)] = at
            (got.demand if kind == "demand" else got.used)[name] = at
        return got
