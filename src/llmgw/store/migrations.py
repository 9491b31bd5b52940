"""Versioned schema. Append a migration; never edit one that has shipped."""

from __future__ import annotations

from llmgw.store.chargeback_sql import CHARGEBACK, OPEN_USAGE

# the lease one control plane holds to reconcile, and the fencing epoch its writes carry (store/sql.py)
LEADER = """
    CREATE TABLE leader (
        id INTEGER PRIMARY KEY, holder TEXT NOT NULL, epoch BIGINT NOT NULL, expires_at DOUBLE PRECISION NOT NULL
    );
    INSERT INTO leader (id, holder, epoch, expires_at) VALUES (1, '', 0, 0);
    """

# revisions: each write of nodes, replicas and keys bumps its counter in the same transaction (the counter's row
# locked until commit, so revisions are committed in order), and node and replica rows carry the revision that
# wrote them: a server sharing the database reads the nodes changed since the revision it has seen
REVISIONS = """
    ALTER TABLE nodes ADD COLUMN rev BIGINT NOT NULL DEFAULT 0;
    ALTER TABLE replicas ADD COLUMN rev BIGINT NOT NULL DEFAULT 0;
    CREATE INDEX nodes_rev ON nodes (rev);
    CREATE TABLE revs (name TEXT PRIMARY KEY, n BIGINT NOT NULL);
    INSERT INTO revs (name, n) VALUES ('nodes', 0), ('replicas', 0), ('keys', 0);
    """

# what each server's routers saw, for the leader: demand for models, replicas used, requests in flight
ACTIVITY = """
    CREATE TABLE activity (
        server TEXT NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL, at DOUBLE PRECISION NOT NULL, n BIGINT NOT NULL,
        PRIMARY KEY (server, kind, name)
    );
    CREATE INDEX activity_at ON activity (at);
    """

# a revocation made through one server reaches the others sharing the store at their next pass
REVOCATION_REVS = """
    INSERT INTO revs (name, n) VALUES ('revocations', 0);
    """

# hub models' resolutions, per source as the catalog names it: the first a server writes is the one every server
# sharing the store uses (control/hub/hub_models.py), until nodes report its commit gone
HUB_RESOLUTIONS = """
    CREATE TABLE hub_resolutions (
        source TEXT PRIMARY KEY, commit_id TEXT NOT NULL, body TEXT NOT NULL
    );
    """

# when each server last heard, itself, the nodes that talk to it (a renewal or a report): one row per server,
# rewritten each pass, so node liveness is shared without a write per node (control/ha/liveness.py). `heard` is JSON
# {node id: milliseconds before `at`}
RENEWALS = """
    CREATE TABLE renewals (server TEXT PRIMARY KEY, at DOUBLE PRECISION NOT NULL, heard TEXT NOT NULL);
    CREATE INDEX renewals_at ON renewals (at);
    """

MIGRATIONS: list[str] = [
    # 1: records kept whole as JSON, keyed by id
    """
    CREATE TABLE nodes (id TEXT PRIMARY KEY, body TEXT NOT NULL);
    CREATE TABLE models (name TEXT PRIMARY KEY, position INTEGER NOT NULL, body TEXT NOT NULL);
    CREATE TABLE replicas (id TEXT PRIMARY KEY, model TEXT NOT NULL, body TEXT NOT NULL);
    CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, body TEXT NOT NULL);
    """,
    # 2: API keys and usage
    """
    CREATE TABLE api_keys (id TEXT PRIMARY KEY, hash TEXT NOT NULL UNIQUE, body TEXT NOT NULL);
    CREATE TABLE usage (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        key_id TEXT NOT NULL, model TEXT NOT NULL, replica_id TEXT NOT NULL,
        prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,
        started_at REAL NOT NULL, duration_s REAL NOT NULL, status INTEGER NOT NULL
    );
    CREATE INDEX usage_started ON usage (started_at);
    """,
    # 3: nodes an operator has cut off, whole or one certificate at a time
    """
    CREATE TABLE revocations (
        node_id TEXT NOT NULL, serial TEXT NOT NULL, at REAL NOT NULL, reason TEXT NOT NULL,
        PRIMARY KEY (node_id, serial)
    );
    """,
    # 4: usage recorded once per request (its id), and running totals so no reader scans every row
    """
    ALTER TABLE usage ADD COLUMN id TEXT;
    CREATE UNIQUE INDEX usage_id ON usage (id);
    CREATE INDEX events_at ON events (at);
    CREATE TABLE usage_totals (
        key_id TEXT NOT NULL, model TEXT NOT NULL, requests INTEGER NOT NULL, prompt_tokens INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL, last_at REAL NOT NULL, PRIMARY KEY (key_id, model)
    );
    INSERT INTO usage_totals
        SELECT key_id, model, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), MAX(started_at)
        FROM usage GROUP BY key_id, model;
    """,
    # 5: usage per key, model and hour, kept beside the rows: "the last 24 hours" reads 24 rows per key and model
    """
    CREATE TABLE usage_hourly (
        key_id TEXT NOT NULL, model TEXT NOT NULL, hour INTEGER NOT NULL, requests INTEGER NOT NULL,
        prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL, last_at REAL NOT NULL,
        PRIMARY KEY (hour, key_id, model)
    );
    INSERT INTO usage_hourly
        SELECT key_id, model, CAST(started_at / 3600 AS INTEGER), COUNT(*), SUM(prompt_tokens),
            SUM(completion_tokens), MAX(started_at)
        FROM usage GROUP BY key_id, model, CAST(started_at / 3600 AS INTEGER);
    """,
    # 6: the lease (above), as PostgreSQL's second
    LEADER,
    # 7: revisions (above), as PostgreSQL's third
    REVISIONS,
    # 8: activity (above), as PostgreSQL's fourth
    ACTIVITY,
    # 9: revocations carry a revision too (PostgreSQL's fifth)
    REVOCATION_REVS,
    # 10: hub models' resolutions (above), as PostgreSQL's sixth
    HUB_RESOLUTIONS,
    # 11: renewals (above), as PostgreSQL's seventh
    RENEWALS,
    # 12: chargeback (store/chargeback_sql.py), as PostgreSQL's eighth
    CHARGEBACK,
    # 13: requests marked in flight, and each request's GPU-seconds (store/chargeback_sql.py), as PostgreSQL's ninth
    OPEN_USAGE,
]
