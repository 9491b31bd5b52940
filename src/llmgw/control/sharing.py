"""What a server's routers saw, shared through the store with the leader, when several servers share one store:
demand for models (a load asked for through a follower), replicas used (idle eviction must not take a replica busy
through another server) and requests in flight. Each server writes its own rows; the leader reads the others'.
Pure bookkeeping over the plane's tables: the plane applies what comes out."""

from __future__ import annotations

from dataclasses import dataclass, field

SERVER = "server "  # the reporter name, in the leader's in-flight table, of another server's routers
Row = tuple[str, str, float, int]  # (kind, name, at, n)


@dataclass
class Others:
    demand: dict[str, float] = field(default_factory=dict)
    used: dict[str, float] = field(default_factory=dict)
    in_flight: dict[str, dict[str, int]] = field(default_factory=dict)  # reporter name -> replica -> requests


@dataclass
class Sharing:
    written: dict[tuple[str, str], tuple[float, int]] = field(default_factory=dict)  # what this server last wrote
    merged: dict[tuple[str, str, str], float] = field(default_factory=dict)  # (server, kind, name) -> at merged

    def rows(self, demand: dict[str, float], used: dict[str, float], own: dict[str, int], now: float) -> list[Row]:
        """This server's rows that changed since it last wrote them; requests in flight every time (their time says
        they are current: a server that stops writing them stops counting)."""
        out: list[Row] = []
        for kind, table in (("demand", demand), ("used", used)):
            for name, at in table.items():
                if self.written.get((kind, name)) != (at, 0):
                    out.append((kind, name, at, 0))
        for name, n in own.items():
            out.append(("inflight", name, now, n))
        for (kind, name), (_, n) in self.written.items():
            if kind == "inflight" and n and name not in own:
                out.append(("inflight", name, now, 0))
        for kind, name, at, n in out:
            self.written[(kind, name)] = (at, n)
        return out

    def others(self, rows: list[tuple[str, str, str, float, int]], me: str, now: float, fresh: float) -> Others:
        """What the other servers wrote that is new to this one; in flight only from rows at most `fresh` old."""
        got = Others()
        for server, kind, name, at, n in rows:
            if server == me:
                continue
            if kind == "inflight":
                if now - at <= fresh:
                    counts = got.in_flight.setdefault(SERVER + server, {})
                    if n > 0:
                        counts[name] = n
                continue
            if self.merged.get((server, kind, name), -1.0) >= at:
                continue  # merged already: a demand met since must not come back from the same old row
            self.merged[(server, kind, name)] = at
            (got.demand if kind == "demand" else got.used)[name] = at
        return got
