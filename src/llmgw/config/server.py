"""server.yaml: listeners, TLS, store, timings and the model catalog."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from llmgw.config.chargeback import ChargebackConfig
from llmgw.config.engines import EngineConfig, EngineName, as_source
from llmgw.config.loader import Renames
from llmgw.config.serving import (
    AdapterConfig,
    Sidecars,
    SleepConfig,
    adapters_checked,
    names_checked,
    sidecar_ports_named,
    sleep_refused,
)
from llmgw.config.types import HEARTBEAT_MAX_S, HEARTBEAT_MIN_S, ByteSize, ConfigPath, Duration, Listen, within
from llmgw.core.limits import KeyLimits
from llmgw.core.strict import Strict
from llmgw.wire.engines import EngineSource
from llmgw.wire.hub import is_hub, parse_hub


class TLSFiles(Strict):
    ca: ConfigPath
    cert: ConfigPath
    key: ConfigPath


class StoreConfig(Strict):
    """sqlite: a file (one server). postgres: a database several servers share; `dsn` names where and who
    ("host=db.internal port=5432 dbname=llmgw user=llmgw"), the password comes from password_file or the
    environment variable password_env, never from the DSN (so it is in no config dump and no message). With
    postgres, `path` only anchors the defaults of admin_token_file and usage_journal_dir."""

    kind: Literal["sqlite", "postgres"] = "sqlite"
    path: ConfigPath = "llmgw.db"
    dsn: str = Field(default="", max_length=1024)
    password_file: ConfigPath | None = None
    password_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")

    @model_validator(mode="after")
    def _postgres_needs_a_dsn_without_a_password(self) -> StoreConfig:
        if self.kind == "postgres" and not self.dsn:
            raise ValueError("store.kind postgres needs store.dsn (host=... dbname=... user=...)")
        if self.kind == "postgres":
            secret = _dsn_secrets(self.dsn)
            if secret:
                raise ValueError(f"store.dsn must not hold the password (it gives {secret}=): put it in "
                                 "store.password_file or the environment variable store.password_env names")
        return self


DSN_SECRETS = ("password", "passfile", "sslpassword")


def _dsn_secrets(dsn: str) -> str:
    """The key of a secret the DSN gives, read as libpq reads it (key=value or a URI, its query included), or "".
    Raises ValueError, in words that do not repeat the DSN, when it cannot be read."""
    import psycopg  # only a postgres store needs it

    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        raise ValueError("store.dsn is not a valid PostgreSQL connection string (key=value pairs or a "
                         "postgresql:// URI)") from None
    return next((k for k in DSN_SECRETS if info.get(k)), "")


class SimSpeed(Strict):
    tokens_per_second: float = Field(default=200.0, gt=0)
    tokens: int = Field(default=16, ge=1)
    load_seconds: Duration = Field(default=0.0, ge=0)  # how long the sim engine takes to load its model
    wake_seconds: Duration = Field(default=0.0, ge=0)  # how long it takes to wake from a level-1 sleep

    def flags(self) -> list[str]:
        """This block on the command line of an engine that reads it (config/engines.py: TAKES_SPEED_FLAGS)."""
        out = ["--tokens-per-second", str(self.tokens_per_second), "--tokens", str(self.tokens)]
        out += ["--load-seconds", str(self.load_seconds)] if self.load_seconds else []
        return out + (["--wake-seconds", str(self.wake_seconds)] if self.wake_seconds else [])


class Profile(Strict):
    gpus_per_shard: int = Field(default=0, ge=0)
    nodes: int = Field(default=1, ge=1)
    gpu_class: str | None = None
    memory: ByteSize = 0  # host memory a shard needs
    args: list[str] = []
    sim: SimSpeed = SimSpeed()


class Scaling(Renames):
    section: ClassVar[str] = "models[].scaling"

    min: int = Field(default=0, ge=0)
    max: int = Field(default=0, ge=0)
    # an on-demand replica unused this long stops (or, given a sleep block, sleeps: config/serving.py)
    stop_unused_after: Duration = 600.0
    # scaling on load (reconcile/scaling.py): requests in flight per ready replica above this for scale_up_after
    # adds one (up to max); below half of it for scale_down_after removes one (never below min). None: off
    target_in_flight: float | None = Field(default=None, gt=0)
    scale_up_after: Duration = 30.0
    scale_down_after: Duration = 300.0

    @field_validator("max")
    @classmethod
    def _max_ge_min(cls, v: int, info: ValidationInfo) -> int:
        lo = info.data.get("min")
        if lo is not None and v < lo:
            raise ValueError(f"must be >= min ({lo})")
        return v


PROMISED = 100  # the priority of a model with min >= 1 that names none: above on-demand models (0)


class ModelSpec(Strict):
    # what clients send as "model", and part of replica ids and of file names on nodes: letters, digits and . _ - :
    # with "/" between parts (org/model), at most 128 characters
    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*(/[A-Za-z0-9._:-]+)*$")
    # a path on the nodes, pypkg://package/file, an http(s):// URL the nodes fetch, hf://org/name[@revision] (a hub
    # repository: resolved to a commit by the control plane, fetched by the nodes; docs/weights.md), or an id the
    # engine resolves
    source: str = Field(min_length=1, max_length=2048)
    # for a URL: what the file must be. Its size lets a node check its disk before fetching; a digest is checked
    # before the file is used (without one, only the size the server announced is)
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    size: ByteSize | None = None
    engine: EngineName
    # how the router picks among ready replicas: the least loaded, or the one that was last sent the most of the
    # request's prompt prefix (its KV cache likely holds it) unless that one is much busier (router.prefix_margin)
    routing: Literal["least_loaded", "prefix"] = "least_loaded"
    profile: Profile = Profile()
    # No scaling stanza means configured and off: a request must never start a model nobody meant to run.
    scaling: Scaling = Scaling(min=0, max=0)
    # config/serving.py: who may take whose GPUs (None: above on-demand models when min >= 1), never demoted when
    # pinned; sleeping when idle; LoRA adapters served as models of their own; processes started before the engine
    priority: int | None = Field(default=None, ge=-1000, le=1000)
    pinned: bool = False
    sleep: SleepConfig | None = None
    adapters: Annotated[list[AdapterConfig], Field(max_length=1024)] = []
    sidecars: Sidecars = []

    @model_validator(mode="after")
    def _sidecar_ports_named(self) -> ModelSpec:
        sidecar_ports_named(self.profile.args, self.sidecars)
        return self

    @field_validator("priority", mode="before")
    @classmethod
    def _whole_priority(cls, v: object) -> object:
        # a quoted number, a fraction or yes/no is more likely a slip than a priority: said so, in the range's words
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not -1000 <= v <= 1000):
            raise ValueError(f"must be a whole number from -1000 to 1000, not {v!r:.40} (higher preempts lower; "
                             f"default {PROMISED} with min >= 1, else 0)")
        return v

    @model_validator(mode="after")
    def _plain_http_needs_a_digest(self) -> ModelSpec:
        # over plain http anyone on the way (or an origin's redirect) decides the bytes; a digest is what says no
        if self.source[:7].lower() == "http://" and not self.sha256:
            raise ValueError("a plain http:// source needs sha256 (the digest its file must have); or use https://")
        if is_hub(self.source):
            parse_hub(self.source)  # its words say what is wrong with it
            if self.sha256 or self.size is not None:
                raise ValueError("a hub source's files, sizes and digests come from the hub: drop sha256 and size")
        adapters_checked(self)
        return self

    @model_validator(mode="after")
    def _sleeps_where_it_can(self) -> ModelSpec:
        if self.sleep is not None:
            sleep_refused(self.engine, self.on_demand, self.profile.nodes)
        return self

    @property
    def on_demand(self) -> bool:
        return self.scaling.min == 0 and self.scaling.max > 0

    @property
    def rank(self) -> int:
        """Its priority: as configured, else PROMISED for a model with min >= 1 and 0 for the rest."""
        if self.priority is not None:
            return self.priority
        return PROMISED if self.scaling.min >= 1 else 0


class HubConfig(Strict):
    """Where models named `hf://org/name` are resolved and fetched from: the Hugging Face hub, or a mirror speaking
    its API. The token (a file holding it, mode 0600) opens gated and private repositories; the control plane
    resolves with it and hands it to the nodes that fetch such a repository, for the hub's own host alone. A
    revision is resolved once and stays pinned to that commit (a branch moving on the hub changes nothing served)
    until the catalog names another revision or the hub no longer has the commit."""

    endpoint: str = Field(default="https://huggingface.co", pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$",
                          max_length=512)
    token_file: ConfigPath | None = None


class RouterConfig(Renames):
    section: ClassVar[str] = "router"

    auth: bool = True  # off only for benchmarks and local experiments
    connect_timeout: Duration = 5.0
    # Non-streaming responses send their headers only when generation ends: this bounds a whole generation,
    # so it is long. Streaming responses are then held to between_chunks_timeout between chunks.
    first_byte_timeout: Duration = 600.0
    between_chunks_timeout: Duration = 120.0
    usage_flush_interval: Annotated[Duration, within(0.01, 3600)] = 1.0
    # connections the router keeps open to one replica's engine; further requests wait up to queue_timeout for one
    connections_per_replica: int = Field(default=64, ge=1, le=4096)
    queue_timeout: Duration = 60.0
    # requests waiting for one model to load (or for any replica of it to be ready); beyond, 429 at once
    max_waiting: int = Field(default=256, ge=1, le=1_000_000)
    # how long a request may be held for its model's load (router/waiting.py): as long as the load is measured to
    # take here, with a margin, or, before any is measured, as long as a replica of it is on its way; never longer
    # than this, and never shorter than load_wait
    max_load_wait: Duration = 600.0
    # prefix-aware routing (models with routing: prefix): prompt blocks of this many characters (about a quarter as
    # many tokens), read up to prefix_max_chars, remembered for the last prefix_entries prefixes; a replica holding
    # a longer prefix wins unless it has more than prefix_margin requests beyond the least loaded one
    prefix_block_chars: int = Field(default=256, ge=16, le=65536)
    prefix_max_chars: int = Field(default=32768, ge=16, le=1 << 22)
    prefix_entries: int = Field(default=200_000, ge=16, le=10_000_000)
    prefix_margin: float = Field(default=4.0, ge=0, le=1e6)
    # tenant limits (core/limits.py) for keys without their own; and what a request without max_tokens may generate
    # (the router sets it: a request reserves it at admission, and may not cost more than it reserved)
    default_limits: KeyLimits = KeyLimits()
    reserve_max_tokens: int = Field(default=1024, ge=1, le=10_000_000)
    # what one image, audio, video or file part of a request may cost as prompt tokens: a URL of a few bytes can
    # stand for thousands of tokens, so the body's bytes do not bound it (set it to your models' most per part)
    reserve_media_tokens: int = Field(default=16384, ge=0, le=10_000_000)
    # how long a router serves from a routing table it cannot confirm (the shared store unreachable, or, for an API
    # worker, its control plane): requests to ready replicas go on meanwhile; past it they are refused (503
    # routing_table_stale), since engines may have moved without its knowing
    serve_stale_for: Duration = 3600.0
    # X-Llmgw-Route (reason, replica, prefix blocks matched) and X-Llmgw-Worker (API worker pid) on answers: for an
    # operator's tests and benchmarks only. Off, they are logged at debug level instead: a match count sent to a
    # client says whether its prompt matches one another tenant sent (docs/security.md)
    expose_routing: bool = False
    # request bodies (router/uploads.py): how many a key without a concurrency limit may have arriving at once, and
    # the bytes of bodies one router process holds at once across keys (one of unstated length, chunked, counts as
    # max_body); beyond either, refused before the body is read
    key_uploads: int = Field(default=8, ge=1, le=100_000)
    body_budget: ByteSize = 256 * 1024 * 1024


class ConnectionLimits(Strict):
    """What one client, authenticated or not, can hold of a listener (tenants' limits are keys': core/limits.py)."""

    # a new connection must deliver its request headers within this, and an idle one is closed after it
    header_timeout: Duration = Field(default=10.0, gt=0)
    api_connections: int = Field(default=4096, ge=1)
    api_connections_per_client: int = Field(default=256, ge=1)
    agent_connections: int = Field(default=12000, ge=1)  # one kept-alive connection per node
    admin_connections: int = Field(default=256, ge=1)
    metrics_connections: int = Field(default=64, ge=1)


class Retention(Strict):
    """How long usage rows and events are kept; totals per key and model are kept for good."""

    usage: Duration = Field(default=90 * 86400.0, gt=0)
    events: Duration = Field(default=30 * 86400.0, gt=0)


class EvictionConfig(Strict):
    idle_after: Duration = 30.0  # unused this long before it may be stopped for another model
    protect_after_ready: Duration = 300.0  # never evict a replica Ready for less: two models must not take turns
    # the share of a node's host memory that replicas asleep there may hold (their SleepConfig.host_memory)
    sleep_host_share: float = Field(default=0.5, ge=0, le=1)


class ServerConfig(Renames):
    section: ClassVar[str] = ""

    agent_listen: Listen = "127.0.0.1:7443"
    api_listen: Listen = "127.0.0.1:8080"
    admin_listen: Listen = "127.0.0.1:9090"
    metrics_listen: Listen | None = None
    tls: TLSFiles
    store: StoreConfig = StoreConfig()
    # the operator token for the management API (made, mode 0600, at the first start); default: beside the store
    admin_token_file: ConfigPath | None = None
    # usage journaled by every API worker before its answer ends, until the store has it; default: beside the store
    usage_journal_dir: ConfigPath | None = None
    retention: Retention = Retention()
    # names (beyond loopback and admin_listen's own address) by which operators reach the management API
    admin_hosts: list[str] = []
    # a node may claim an engine address it reports from, one its certificate names, or one inside these networks
    node_networks: list[str] = []
    connections: ConnectionLimits = ConnectionLimits()
    node_lost_after: Annotated[Duration, within(0.2)] = 60.0
    failed_kept_for: Duration = 300.0  # failed replicas stay on view (holding nothing) this long after they stop
    # node_lost_after must be longer
    heartbeat_interval: Annotated[Duration, within(HEARTBEAT_MIN_S, HEARTBEAT_MAX_S)] = 3.0
    reconcile_interval: Annotated[Duration, within(0.01, 3600)] = 1.0
    # how long the lease of the control plane that reconciles lasts unless extended (extended every third of it):
    # with several servers on one PostgreSQL, a new leader takes over within this long of the old one's end
    leader_lease: Annotated[Duration, within(0.3)] = 15.0
    load_wait: Duration = 15.0
    # a replica told to stop (idle, evicted, scaled down, removed) leaves the routing table at once; its engine runs
    # on while routers have requests on it, up to this long, so they finish
    drain_timeout: Duration = 60.0
    max_body: ByteSize = 8 * 1024 * 1024
    router: RouterConfig = RouterConfig()
    # API worker processes sharing api_listen (SO_REUSEPORT); beyond one, they are separate processes
    api_workers: int = Field(default=1, ge=1, le=64)
    eviction: EvictionConfig = EvictionConfig()
    chargeback: ChargebackConfig = ChargebackConfig()  # GPU-hour prices and chargeback windows (config/chargeback)
    # which engines every node has: a name (its default source, config/engines.py) or a whole source
    engines: list[EngineName | EngineConfig] = ["llamacpp", "sim"]
    hub: HubConfig = HubConfig()
    models: list[ModelSpec] = []

    @field_validator("node_networks")
    @classmethod
    def _networks(cls, v: list[str]) -> list[str]:
        import ipaddress

        for n in v:
            try:
                ipaddress.ip_network(n, strict=False)
            except ValueError:
                raise ValueError(f"{n!r} is not a network like 10.0.0.0/16") from None
        return v

    def token_path(self) -> str:
        return self.admin_token_file or self._beside_store("admin.token")

    def journal_path(self) -> str:
        return self.usage_journal_dir or self._beside_store("usage-journal")

    def _beside_store(self, name: str) -> str:
        import os

        return os.path.join(os.path.dirname(os.path.abspath(self.store.path)), name)

    def engine_names(self) -> list[str]:
        return [e if isinstance(e, str) else e.name for e in self.engines]

    def engine_sources(self) -> list[EngineSource]:
        return [s for s in (as_source(e) for e in self.engines) if s is not None]

    @model_validator(mode="after")
    def _unique_engines(self) -> ServerConfig:
        names = self.engine_names()
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"engines: {dup[0]} named twice")
        self.engine_sources()  # a requirements file that cannot be read is a config error now, not on every node
        return self

    @model_validator(mode="after")
    def _heartbeats_before_loss(self) -> ServerConfig:
        if self.heartbeat_interval >= self.node_lost_after:
            raise ValueError(f"heartbeat_interval ({self.heartbeat_interval:g}s) must be shorter than node_lost_after "
                             f"({self.node_lost_after:g}s): every node would be lost between two heartbeats")
        return self

    @model_validator(mode="after")
    def _budget_holds_a_body(self) -> ServerConfig:
        if self.router.body_budget < self.max_body:
            raise ValueError(f"router.body_budget ({self.router.body_budget} bytes) must hold at least one body of "
                             f"max_body ({self.max_body} bytes): no chunked body could ever be read")
        return self

    @model_validator(mode="after")
    def _unique_models(self) -> ServerConfig:
        seen: set[str] = set()
        for m in self.models:
            if m.name in seen:
                raise ValueError(f"models: duplicate model name {m.name!r}")
            seen.add(m.name)
        names_checked(self.models)
        return self
