from __future__ import annotations

from typing import Any

from llmgw.agent.discovery import DeclaredFabric, check_fabrics
from llmgw.config.agent import FabricAttachment
from llmgw.wire.messages import Fabric, IBAdapter, IBPort


def fabric_words(declared: Any, adapters: Any) -> tuple[list[Fabric], list[str]]:
    fabrics, problems = check_fabrics(declared, adapters)
    return fabrics, [p.message for p in problems]


def test_problems_carry_codes() -> None:
    _, absent = check_fabrics([DeclaredFabric("ib-a", ["mlx5_3"])], TWO_NDR)
    _, init = check_fabrics([DeclaredFabric("ib-a", ["mlx5_0"])], [IBAdapter(name="mlx5_0")])
    assert absent[0].code == "FabricAdapterMissing" and init[0].code == "FabricPortNotActive"
    assert {p.subject for p in absent + init} == {"ib-a"}


def adapter(name: str, *ports: tuple[str, float]) -> IBAdapter:
    return IBAdapter(name=name, ports=[IBPort(port=i + 1, state=s, rate_gbps=r) for i, (s, r) in enumerate(ports)])


TWO_NDR = [adapter("mlx5_0", ("ACTIVE", 400.0)), adapter("mlx5_1", ("ACTIVE", 400.0))]


def test_all_present_and_active() -> None:
    fabrics, problems = fabric_words([DeclaredFabric("ib-a", ["mlx5_0", "mlx5_1"])], TWO_NDR)
    assert fabrics == [Fabric(name="ib-a", adapters=["mlx5_0", "mlx5_1"], rate_gbps=400.0)]
    assert problems == []


def test_absent_adapter_is_not_advertised() -> None:
    fabrics, problems = fabric_words([DeclaredFabric("ib-a", ["mlx5_0", "mlx5_3"])], TWO_NDR)
    assert fabrics == [Fabric(name="ib-a", adapters=["mlx5_0"], rate_gbps=400.0)]
    assert problems == ["fabric ib-a: adapter mlx5_3 is not on this node (found: mlx5_0, mlx5_1)"]


def test_adapter_in_init_is_not_advertised() -> None:
    adapters = [adapter("mlx5_0", ("INIT", 400.0)), adapter("mlx5_1", ("ACTIVE", 400.0))]
    fabrics, problems = fabric_words([DeclaredFabric("ib-a", ["mlx5_0", "mlx5_1"])], adapters)
    assert fabrics == [Fabric(name="ib-a", adapters=["mlx5_1"], rate_gbps=400.0)]
    assert problems == ["fabric ib-a: adapter mlx5_0 has no ACTIVE port (port 1: INIT)"]


def test_rate_is_the_slowest_active_link() -> None:
    adapters = [
        adapter("mlx5_0", ("ACTIVE", 400.0)),
        adapter("mlx5_1", ("ACTIVE", 200.0), ("DOWN", 0.0)),  # the DOWN port does not drag the rate to 0
    ]
    fabrics, problems = fabric_words([DeclaredFabric("ib-a", ["mlx5_0", "mlx5_1"])], adapters)
    assert fabrics[0].rate_gbps == 200.0
    assert problems == []


def test_typo_is_absent_with_a_hint() -> None:
    fabrics, problems = fabric_words([DeclaredFabric("ib-a", ["mlx_0"])], TWO_NDR)
    assert fabrics == []
    assert problems == [
        "fabric ib-a: adapter mlx_0 is not on this node (found: mlx5_0, mlx5_1; did you mean mlx5_0?)",
        "fabric ib-a: not advertised: no adapter with an ACTIVE port",
    ]


def test_fabric_without_usable_adapter_is_not_advertised_while_others_are() -> None:
    adapters = [adapter("mlx5_0", ("ACTIVE", 400.0)), adapter("mlx5_1", ("INIT", 400.0), ("DOWN", 0.0))]
    fabrics, problems = fabric_words(
        [DeclaredFabric("ib-a", ["mlx5_0"]), DeclaredFabric("ib-b", ["mlx5_1"])], adapters
    )
    assert [f.name for f in fabrics] == ["ib-a"]
    assert problems == [
        "fabric ib-b: adapter mlx5_1 has no ACTIVE port (port 1: INIT, port 2: DOWN)",
        "fabric ib-b: not advertised: no adapter with an ACTIVE port",
    ]


def test_letter_o_for_zero_gets_a_hint() -> None:
    _fabrics, problems = fabric_words([DeclaredFabric("ib-a", ["mlx5_O"])], TWO_NDR)
    assert problems[0].endswith("(found: mlx5_0, mlx5_1; did you mean mlx5_0?)")


def test_node_without_adapters() -> None:
    fabrics, problems = fabric_words([DeclaredFabric("ib-a", ["mlx5_0"])], [])
    assert fabrics == []
    assert problems[0] == "fabric ib-a: adapter mlx5_0 is not on this node (found: none)"


def test_adapter_without_ports() -> None:
    _fabrics, problems = fabric_words([DeclaredFabric("ib-a", ["mlx5_0"])], [IBAdapter(name="mlx5_0")])
    assert problems[0] == "fabric ib-a: adapter mlx5_0 has no ACTIVE port (no ports)"


def test_name_written_twice_is_one_adapter() -> None:
    fabrics, _ = fabric_words([DeclaredFabric("ib-a", ["mlx5_0", "mlx5_0"])], TWO_NDR)
    assert fabrics[0].adapters == ["mlx5_0"]


def test_accepts_agent_config_attachments() -> None:
    fabrics, problems = fabric_words([FabricAttachment(name="ib-a", adapters=["mlx5_1"])], TWO_NDR)
    assert fabrics == [Fabric(name="ib-a", adapters=["mlx5_1"], rate_gbps=400.0)]
    assert problems == []
