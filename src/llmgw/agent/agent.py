"""The agent loop: discover, report, receive the desired state, converge. Every few seconds, level-triggered."""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from pathlib import Path

from llmgw import __version__
from llmgw.agent import launches, observe
from llmgw.agent.adapter_files import adapter_sources, adapters_in_use
from llmgw.agent.client import ControlPlaneClient
from llmgw.agent.discovery import HostRoot, check_fabrics, gpu_use, hardware_warnings
from llmgw.agent.discovery.commands import run_command
from llmgw.agent.discovery.infiniband import probe_adapters
from llmgw.agent.engines import builtin
from llmgw.agent.engines.base import Loopback
from llmgw.agent.gated import TlsFiles
from llmgw.agent.identity import node_id, route_address
from llmgw.agent.installs.installer import Installer
from llmgw.agent.installs.packages import PackageTool
from llmgw.agent.installs.recipes import Context, Limits
from llmgw.agent.named_engines import NamedEngines
from llmgw.agent.redirects import Redirects
from llmgw.agent.renewals import Reporter
from llmgw.agent.revocations import Revocations
from llmgw.agent.supervisor import Supervisor, sidecars
from llmgw.agent.supervisor.adopt import Running, discard, find_running
from llmgw.agent.supervisor.gpu_proof import GpuProof
from llmgw.agent.supervisor.supervisor import RestartPolicy
from llmgw.agent.weights import hubdir, local
from llmgw.agent.weights.fetcher import Fetcher
from llmgw.agent.weights.serve import start_peer_listener
from llmgw.config.agent import AgentConfig
from llmgw.config.types import heartbeat_within
from llmgw.core.clock import Clock
from llmgw.core.errors import LlmgwError, UpstreamError
from llmgw.core.reasons import Reason
from llmgw.net.listeners import Listener
from llmgw.pki.tls import client_context, server_context
from llmgw.wire.engines import EngineSource
from llmgw.wire.hub import is_hub
from llmgw.wire.messages import EngineStatus, Hardware, NodeReport, Problem, ShardSpec, WeightsDir, is_remote

log = logging.getLogger(__name__)
FAST_PROBE_S = 0.1  # how often an engine that is starting is probed, between heartbeats
WATCH_RETRY_S = 600.0
WATCH_ERROR_RETRY_S = 1.0  # the first retry after a failed watch; doubled per failure, up to an interval


class Agent:
    def __init__(self, cfg: AgentConfig, clock: Clock) -> None:
        self.cfg = cfg
        self.clock = clock
        self.node_id = node_id(cfg.node_id)
        self.address = cfg.address or ""
        self.engines: list[EngineStatus] = []
        self.engines_probed = False
        self.named = NamedEngines(cfg, clock)
        self.installer = Installer(Context(
            root=Path(cfg.engines_dir()), clock=clock, python=cfg.engine_python,
            packages=PackageTool(apt_get=cfg.apt_get, dpkg_query=cfg.dpkg_query),
            limits=Limits(download_bytes=cfg.max_download), redirects=Redirects(tuple(cfg.redirects_allowed)),
        ))
        self.supervisor: Supervisor | None = None
        self.client: ControlPlaneClient | None = None
        self.reporter = Reporter(clock)  # each step: a renewal, or the report whole when it changed
        self.interval = cfg.heartbeat_interval
        self.last_error = ""
        self.wake = asyncio.Event()  # the next heartbeat is due now (the control plane said this node's shards changed)
        self.hand_over = False  # set by SIGUSR2: exit leaving engines to the next agent (an upgrade)
        self._found: dict[tuple[str, int], Running] = {}
        self._hardware: Hardware | None = None  # the last discovery that succeeded
        self._discovery_error = ""
        self.weights_dir = Path(cfg.weights_dir)
        self.fetcher = Fetcher(
            self.weights_dir, clock, self._client_tls, self.node_id, cfg.weights_budget, cfg.max_weights_file,
            network=self._weights_on_network, in_use=self._weights_in_use,
            redirects=Redirects(tuple(cfg.redirects_allowed)),
        )
        self._peer_listener: Listener | None = None
        self.revocations = Revocations(Path(cfg.state_dir) / "revoked.json")
        self.peer_port = 0
        self._network_fs = False

    def learn_revoked(self, items: list[str]) -> None:
        self.revocations.learn(items)

    def _client_tls(self) -> ssl.SSLContext:
        return client_context(Path(self.cfg.tls.cert), Path(self.cfg.tls.key), Path(self.cfg.tls.ca))

    def _weights_on_network(self) -> bool:
        return self._network_fs

    def _weights_in_use(self) -> set[Path]:
        """Weights files a shard runs from (or will be started again from): never removed to make room."""
        if self.supervisor is None:
            return set()
        out: set[Path] = set()
        for sp in self.supervisor.shards.values():
            if not is_remote(sp.spec.source) or sp.state == "failed":
                continue
            if is_hub(sp.spec.source):  # every file its directory links to
                out |= hubdir.targets(self.weights_dir, sp.spec.weights)
            else:
                out.add(local.target_for(self.weights_dir, sp.spec.source))
        return out | {p for sp in self.supervisor.shards.values() if sp.state != "failed"
                      for p in adapters_in_use(self.weights_dir, sp.spec)}

    def resolve(self, spec: ShardSpec, ports: Loopback | None = None) -> launches.Resolved:
        node = launches.Node(node_id=self.node_id, address=self.address, engines=self.engines, fetcher=self.fetcher,
                             keys_dir=Path(self.cfg.state_dir) / "keys",
                             threads=self.cfg.engine_threads or len(os.sched_getaffinity(0)))
        return launches.resolve(node, spec, ports)

    async def start(self) -> None:
        ca, cert, key = (Path(self.cfg.tls.ca), Path(self.cfg.tls.cert), Path(self.cfg.tls.key))
        self.client = ControlPlaneClient(
            self.cfg.control_planes,
            lambda: client_context(cert, key, ca),
            self.cfg.request_timeout,
            watch=[str(cert), str(key), str(ca)],
        )
        if not self.address:
            self.address = route_address(self.cfg.control_planes[0])
        self.weights_dir.mkdir(parents=True, exist_ok=True)  # so disk is reported from the start
        await self._serve_peers()
        logs = Path(self.cfg.state_dir) / "logs"
        restart = RestartPolicy(self.cfg.restart_backoff, self.cfg.restart_backoff_max, self.cfg.max_restarts)
        inventory = Path(self.cfg.gpu_inventory) if self.cfg.gpu_inventory else None
        read = gpu_use.reader(gpu_use.nvml_module(), run_command, inventory)  # what each process holds on each GPU
        prove = GpuProof(read, lambda: self._hardware,
                         lambda engine, words: self.installer.refuse(engine, Reason.GPUUnused, words))
        self.supervisor = Supervisor(self.clock, logs, self.address, self.resolve, restart,
                                     tls=TlsFiles(self.cfg.tls.cert, self.cfg.tls.key, self.cfg.tls.ca), prove=prove)
        # engines a previous agent left running: adopted once this agent knows its engines (the first pass), kept
        # if still wanted, stopped at the first converge if not
        self._found = find_running(logs)
        sidecars.reap(logs, kept=sidecars.beside(self._found.values()))  # beside engines gone already
        try:
            adapters = await asyncio.to_thread(probe_adapters, HostRoot(Path(self.cfg.host_root)))
        except LlmgwError as e:  # said again with every heartbeat, as a problem the control plane shows
            log.error("cannot check the declared fabrics: %s", e)
            return
        _, problems = check_fabrics(self.cfg.fabrics, adapters)
        for p in problems:
            log.error("%s (agent.yaml fabrics)", p.message)

    async def _serve_peers(self) -> None:
        """Serve the weights this node holds to its cluster's nodes, if its certificate may serve (one issued
        before node certificates could is refused by every copier: say so, and copy from the origin instead)."""
        if not self.cfg.peer_port:
            return
        try:
            tls = server_context(Path(self.cfg.tls.cert), Path(self.cfg.tls.key), Path(self.cfg.tls.ca),
                                 require_client=True)
            self._peer_listener = await start_peer_listener(self.weights_dir, self.address, self.cfg.peer_port, tls,
                                                            self.revocations.refuses)
        except (OSError, LlmgwError) as e:
            log.error("cannot serve weights to other nodes on %s:%d: %s (they fetch from the origin instead)",
                      self.address, self.cfg.peer_port, e)
            return
        self.peer_port = self.cfg.peer_port
        log.info("serving held weights to the cluster's nodes on %s:%d", self.address, self.peer_port)

    async def probe_engines(self) -> None:
        """The engines this node has: those it runs on purpose (named_engines.py), and those the control plane
        names, installed here and seen to run (or being installed, or why not)."""
        await self.named.refresh(first=not self.engines_probed)
        if not self.installer.settled:
            await self.converge_engines(self.installer.load_wanted())
        named = {e.name for e in self.named.statuses}
        engines = self.named.statuses + [e for e in self.installer.statuses() if e.name not in named]
        if engines != self.engines:
            log.info("engines: %s", ", ".join(f"{e.name} {e.version} runs={e.runs}" for e in engines))
        self.engines, self.engines_probed = engines, True

    def _in_use(self) -> set[Path]:
        """Every path a running engine's command line names (its executable, its environment's interpreter), and
        every engine agent.yaml names: builds there are not to be removed. Read from /proc, so an engine adopted
        from the previous agent counts with the build it really runs from."""
        pids = [r.pid for r in self._found.values()]
        out = {Path(e.path) for e in self.cfg.engines.values()}
        if self.supervisor is not None:
            pids += [sp.proc.pid for sp in self.supervisor.shards.values() if sp.proc is not None]
            # a shard waiting to be restarted has no process, and is started again from its launch's executable
            out |= {Path(a) for sp in self.supervisor.shards.values() if sp.launch is not None
                    and sp.state != "failed" for a in sp.launch.argv if a.startswith("/")}
        return out | observe.command_line_paths(pids)

    async def converge_engines(self, sources: list[EngineSource]) -> None:
        """Install what the control plane names and this node runs, except what agent.yaml names on purpose."""
        mine = [s for s in sources if s.name in self.cfg.probe_engines and s.name not in self.cfg.engines
                and not builtin(s.name)]
        if self._hardware is None:
            await self.discover()  # the build chosen depends on the processor and driver: read them first
        # until discovery has worked once, nothing is chosen or removed (what is installed is still reported)
        await self.installer.converge(mine, self._hardware, self._in_use())

    async def discover(self) -> tuple[Hardware, list[Problem]]:
        """What the machine has now; when a probe fails (EACCES under /sys, an inventory edited into nonsense),
        what it had last time, and the probe's words as a problem. A node that cannot read itself still reports
        and still runs its shards: going silent would get them rebuilt elsewhere for a fault that harms nothing."""
        try:
            hw = await asyncio.to_thread(observe.read_hardware, self.cfg)
        except Exception as e:
            words = str(e).strip().replace("\n", "; ")[:1500] or type(e).__name__
            if words != self._discovery_error:
                log.error("hardware discovery failed: %s (reporting the last hardware seen)", words)
            self._discovery_error = words
            stale = " (reporting the hardware seen before)" if self._hardware is not None else ""
            problem = Problem(code="DiscoveryFailed", message=f"hardware discovery failed{stale}: {words}",
                              subject="discovery")
            return (self._hardware or Hardware()), [problem]
        if self._discovery_error:
            log.info("hardware discovery works again")
        self._hardware, self._discovery_error = hw, ""
        return hw, []

    async def report(self) -> NodeReport:
        hw, problems = await self.discover()
        await self.probe_engines()
        fabrics, fabric_problems = check_fabrics(self.cfg.fabrics, hw.ib_adapters)
        weights, dirs = await asyncio.to_thread(self._observe_weights)
        lo, hi = self.cfg.ports()
        assert self.supervisor is not None
        return NodeReport(
            node_id=self.node_id,
            address=self.address,
            agent_version=__version__,
            hardware=hw,
            engines_probed=self.engines_probed,
            engines=self.engines,
            install_progress=self.installer.progress()[:64],
            installs=self.installer.installs()[:16],
            fabrics=fabrics,
            weights=weights,
            weights_dirs=dirs,
            fetches=self.fetcher.statuses(),
            peer_port=self.peer_port,
            shards=self.supervisor.states(),
            problems=(problems + fabric_problems + hardware_warnings(hw))[:64],
            port_low=lo,
            port_high=hi,
        )

    def _observe_weights(self) -> tuple[list[str], list[WeightsDir]]:
        held, dirs = observe.observe_weights(self.cfg)
        self._network_fs = dirs[-1].network  # whether the fetcher writes to a network file system
        return held, dirs

    async def step(self) -> None:
        assert self.client is not None and self.supervisor is not None
        if self._found:
            await self.probe_engines()
            found, self._found = self._found, {}
            self.supervisor.adopt(found)
        await self.supervisor.tick()
        report = await self.report()
        try:
            desired = await self.reporter.send(self.client, report)
        except UpstreamError as e:
            if str(e) != self.last_error:
                log.error("%s", e)
            self.last_error = str(e)
            return  # keep running what runs: a control plane outage is not a reason to stop serving
        self.last_error = ""
        self.interval = heartbeat_within(desired.heartbeat_interval)
        if desired.version >= 4:  # an older control plane sends no list, which is not an empty one
            self.learn_revoked(desired.revoked)
        if desired.version >= 3:  # an older control plane names no sources: the node keeps what it has
            await self.converge_engines(desired.engine_sources)
        self.fetcher.keep({s.source for s in desired.shards} | adapter_sources(desired.shards))
        await self.supervisor.converge(desired.shards)

    async def run(self, stop: asyncio.Event) -> None:
        await self.start()
        log.info("agent %s at %s reporting to %s", self.node_id, self.address, ", ".join(self.cfg.control_planes))
        watcher = asyncio.create_task(self._watch(stop))
        try:
            while not stop.is_set():
                try:
                    await self.step()
                except Exception as e:  # a failed pass is retried; ending here would stop every engine we run
                    if str(e) != self.last_error:
                        log.exception("agent pass failed; engines keep running, retrying")
                    self.last_error = str(e)
                await self._pause(stop)
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
            await self.close()

    async def _pause(self, stop: asyncio.Event) -> None:
        """Until the next heartbeat: the interval, or sooner when the control plane says this node's shards changed
        (the watch) or a starting engine's state changes (probed every FAST_PROBE_S meanwhile, so the moment it
        serves is reported at once: a cold start waits on it). Timed by the event loop, like the I/O it spaces."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.interval
        before = self._shard_states()
        while not stop.is_set():
            if self.wake.is_set():
                self.wake.clear()
                return
            left = deadline - loop.time()
            if left <= 0:
                return
            settling = self.supervisor is not None and self.supervisor.settling()
            await _either(stop, self.wake, min(left, FAST_PROBE_S) if settling else left)
            if settling and self.supervisor is not None and not stop.is_set():
                await self.supervisor.tick(starting_only=True)
                if self._shard_states() != before:
                    return

    def _shard_states(self) -> list[tuple[tuple[str, int], str]]:
        return [] if self.supervisor is None else [(k, sp.state) for k, sp in self.supervisor.shards.items()]

    async def _watch(self, stop: asyncio.Event) -> None:
        """Wait at the control plane for the shards this node is to run to change, and wake the loop when they do
        (one early heartbeat, which brings the new desired state). An error is retried after a second, doubling up to
        an interval (a transient one must not cost a cold start a whole heartbeat interval); a control plane that
        does not serve watches is asked again every WATCH_RETRY_S."""
        seen = ""
        failures = 0
        while not stop.is_set():
            assert self.client is not None
            pause = min(self.interval, WATCH_ERROR_RETRY_S * 2**min(failures, 16))
            try:
                got = await self.client.watch(seen)
            except UpstreamError as e:
                log.debug("watch: %s", e)
                failures += 1
            except Exception:  # never the end of watching: heartbeats alone would be an interval late from then on
                log.exception("watch failed; watching again in %.0fs", pause)
                failures += 1
            else:
                failures = 0
                if got is not None:
                    if got != seen:
                        seen = got
                        self.wake.set()
                    continue
                pause = WATCH_RETRY_S
            try:
                await asyncio.wait_for(stop.wait(), pause)
            except TimeoutError:
                pass

    async def close(self) -> None:
        self.named.close()
        await self.installer.close()
        await self.fetcher.close()
        if self._peer_listener is not None:
            await self._peer_listener.cleanup()
        if not self.hand_over:
            for run in self._found.values():  # found at start and never taken over: a stop leaves nothing behind
                discard(run)
            sidecars.stop_recorded(sidecars.beside(self._found.values()))
            self._found = {}
        if self.supervisor is not None:
            if self.hand_over:
                log.info("handing over: engines keep running for the next agent to adopt")
            await self.supervisor.close(keep_engines=self.hand_over)
        if self.client is not None:
            await self.client.close()


async def _either(a: asyncio.Event, b: asyncio.Event, timeout: float) -> None:
    """Until either event is set, or `timeout` passes."""
    waits = [asyncio.ensure_future(a.wait()), asyncio.ensure_future(b.wait())]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
