"""Reason codes: why a node cannot take a shard, why a replica is not ready. Messages carry the node's words."""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    # placement feasibility
    NodeNotReady = "NodeNotReady"
    EngineNotProbed = "EngineNotProbed"
    EngineMissing = "EngineMissing"
    EngineCannotRun = "EngineCannotRun"
    GPUClassMismatch = "GPUClassMismatch"
    InsufficientGPUs = "InsufficientGPUs"
    InsufficientMemory = "InsufficientMemory"
    NoFabric = "NoFabric"
    FabricTooSmall = "FabricTooSmall"
    NodeNotWhole = "NodeNotWhole"
    NoFreePort = "NoFreePort"
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
