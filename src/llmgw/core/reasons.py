"""Reason codes: why a node cannot take a shard, why a replica is not ready. Messages carry the node's words."""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    # placement feasibility
    NodeNotReady = "NodeNotReady"
    EngineNotProbed = "EngineNotProbed"
    EngineMissing = "EngineMissing"
    EngineCannotRun = "EngineCannotRun"
    EngineInstalling = "EngineInstalling"  # the node is installing the engine; its progress in its words
    GPUClassMismatch = "GPUClassMismatch"
    InsufficientGPUs = "InsufficientGPUs"
    InsufficientMemory = "InsufficientMemory"
    NoFabric = "NoFabric"
    FabricTooSmall = "FabricTooSmall"
    NodeNotWhole = "NodeNotWhole"
    NoFreePort = "NoFreePort"
    AgentTooOld = "AgentTooOld"  # the node's agent speaks a wire version older than the model's source needs
    # replica lifecycle
    Placed = "Placed"
    Unschedulable = "Unschedulable"
    ShardsStarting = "ShardsStarting"
    ShardMissing = "ShardMissing"
    ShardFailed = "ShardFailed"
    NodeLost = "NodeLost"
    AllShardsReady = "AllShardsReady"
    Idle = "Idle"
    Evicted = "Evicted"
    ScaledDown = "ScaledDown"
    Removed = "Removed"  # the model left the catalog
    ShardsGone = "ShardsGone"  # a failed replica none of whose shards runs any more: it holds nothing
    WeightsUnusable = "WeightsUnusable"  # a shard's weights are missing, empty or unreadable on its node
    ModelNotLoaded = "ModelNotLoaded"  # the engine's health answers, but it serves no model
    EngineExited = "EngineExited"  # a shard's process ended (it is restarted, up to a limit)
    # it served, and no longer answers: its health probes go unanswered, or a one-token completion does
    EngineUnresponsive = "EngineUnresponsive"
    # node conditions
    NodeReady = "NodeReady"
    NodeRevoked = "NodeRevoked"
    ProbeCompleted = "ProbeCompleted"
    DiscoveryFailed = "DiscoveryFailed"  # a probe failed in a way that is not absence (EACCES, a broken inventory)
    EnginesRun = "EnginesRun"
    NoEngine = "NoEngine"
    EngineFlagsMissing = "EngineFlagsMissing"  # the engine's --help lacks a flag llmgw passes
    EngineCheckInconclusive = "EngineCheckInconclusive"  # its --help looks truncated: the check proves nothing
    EngineInstallFailed = "EngineInstallFailed"  # the last install attempt failed (retried with back-off)
    DigestMismatch = "DigestMismatch"  # a download's sha256 is not the one published for it
    ArchiveUnsafe = "ArchiveUnsafe"  # an archive member would land outside the install directory, or is a device
    DownloadFailed = "DownloadFailed"
    MissingLibraries = "MissingLibraries"  # ldd names libraries the build needs and the node lacks
    PackagesFailed = "PackagesFailed"  # the OS packages a build needs could not be installed
    NoBuildForNode = "NoBuildForNode"  # no variant of the engine fits this node's processor
    NoBuildForProcessor = "NoBuildForProcessor"  # an engine has GPU builds, none for this node's processor family
    DriverTooOld = "DriverTooOld"  # a CUDA build needs a newer NVIDIA driver than the node's
    GPUUnused = "GPUUnused"  # an engine ready on a GPU build holds no memory on the GPUs it was given (NVML's word)
    NoGPUBuild = "NoGPUBuild"  # the model asks for GPUs; the node's build of its engine is a CPU one, which uses none
    LibcTooOld = "LibcTooOld"  # a build needs a newer C library than the node's (archives built on newer distros)
    DigestUnknown = "DigestUnknown"  # the release's digest list does not name the file, or could not be read
    DiskFull = "DiskFull"
    InsufficientDisk = "InsufficientDisk"  # a file would not fit: its size against the free space, in bytes
    SizeMismatch = "SizeMismatch"  # a file's size is not the one the catalog (or the server) gave
    WeightsFetching = "WeightsFetching"  # the shard waits for its weights: fetched, or copied from a peer node
    # a model named by a hub id (wire/hub.py)
    HubResolving = "HubResolving"  # the control plane has not resolved the revision to a commit yet
    HubUnreachable = "HubUnreachable"  # the hub (or the mirror configured) did not answer, or answered 5xx
    HubAccessDenied = "HubAccessDenied"  # a gated or private repository, and no token (or one the hub refused)
    HubNotFound = "HubNotFound"  # no such repository, or no such revision in it
    RevisionGone = "RevisionGone"  # the resolved commit is no longer on the hub (history rewritten): resolved again
    NoWeightsFiles = "NoWeightsFiles"  # the repository has no weights in a format the engines read (safetensors, bin)
    FabricsActive = "FabricsActive"
    NoFabricDeclared = "NoFabricDeclared"
    FabricPortNotActive = "FabricPortNotActive"
    FabricAdapterMissing = "FabricAdapterMissing"
    FabricProblem = "FabricProblem"
    GPUsOK = "GPUsOK"
    NoGPUs = "NoGPUs"
    GPUFaulty = "GPUFaulty"
    GPUDiscoveryProblem = "GPUDiscoveryProblem"
    VectorExtensions = "VectorExtensions"
    NoAVX2 = "NoAVX2"
    CPUUnknown = "CPUUnknown"
    NotX86 = "NotX86"
    # priorities and preemption (reconcile/preemption.py)
    Preempted = "Preempted"  # stopped (or put to sleep) for a model of higher priority
    WaitingForRoom = "WaitingForRoom"  # not placed yet: replicas preempted for it are draining or stopping
    # sleep (wire/serving.py)
    Sleeping = "Sleeping"  # idle: its engine sleeps, its GPUs are free; the first request wakes it
    SleepFailed = "SleepFailed"  # its engine could not sleep (GPU memory not freed) or wake: it is stopped instead
    # its engine refused to start able to sleep on this node (vLLM's CPU build): it runs there without, in its words
    SleepUnsupported = "SleepUnsupported"
    FasterToLoad = "FasterToLoad"  # a sleeper stopped: a load elsewhere is measured faster than its wake
    # sidecars (wire/serving.py)
    SidecarFailed = "SidecarFailed"  # a sidecar exited or never became ready: the shard fails with its words
    SidecarsStarting = "SidecarsStarting"  # the engine waits for its sidecars to be ready (which, for how long)
    # LoRA adapters (wire/serving.py)
    AdapterFailed = "AdapterFailed"  # an adapter could not be fetched or loaded, in the engine's words


def reason_or(code: str, default: Reason) -> Reason:
    """A code as a node sent it, if it is one of ours; otherwise the default (a node's text never becomes a code)."""
    try:
        return Reason(code)
    except ValueError:
        return default
