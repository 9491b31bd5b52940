"""server.yaml `engines:`: a name takes this release's default source; a whole entry pins the operator's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.config.engines import LLAMACPP_DEFAULT
from llmgw.config.loader import load
from llmgw.config.server import ServerConfig
from llmgw.core.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"
BASE = "tls: {ca: ca.crt, cert: c.crt, key: c.key}\n"


def server(tmp: Path, text: str) -> ServerConfig:
    p = tmp / "server.yaml"
    p.write_text(BASE + text)
    return load(ServerConfig, p)


def test_by_default_every_node_has_this_releases_llama_cpp_and_sim(tmp_path: Path) -> None:
    s = server(tmp_path, "")
    assert s.engine_names() == ["llamacpp", "sim"]
    assert s.engine_sources() == [LLAMACPP_DEFAULT]
    x86 = next(v for v in LLAMACPP_DEFAULT.variants if v.variant == "cpu-x86_64")
    assert x86.url.endswith("/b11026/llama-b11026-bin-ubuntu-x64.tar.gz")
    assert LLAMACPP_DEFAULT.digests_url == "https://api.github.com/repos/ggml-org/llama.cpp/releases/tags/b11026"


def test_the_default_llama_cpp_offers_gpu_builds_newest_cuda_first() -> None:
    by_name = {v.variant: v for v in LLAMACPP_DEFAULT.variants}
    assert sorted(by_name) == ["cpu-arm64", "cpu-x86_64", "cuda12-x86_64", "cuda13-x86_64", "vulkan-x86_64"]
    cuda12 = by_name["cuda12-x86_64"]
    assert cuda12.url.endswith("/b11026/llama-b11026-bin-ubuntu-cuda-12.8-x64.tar.gz")
    assert cuda12.runtime_url.endswith("/b11026/cudart-llama-b11026-bin-ubuntu-cuda-12.8-x64.tar.gz")
    assert (cuda12.cuda, cuda12.glibc) == ("12.8", "2.39")
    assert by_name["cuda13-x86_64"].cuda == "13.3" and "libvulkan1" in by_name["vulkan-x86_64"].packages


def test_an_operator_pin_keeps_every_field_of_a_gpu_build(tmp_path: Path) -> None:
    s = server(tmp_path, """engines:
  - name: llamacpp
    version: b2
    digests_url: https://api.github.com/repos/ggml-org/llama.cpp/releases/tags/b2
    variants:
      - {variant: cuda12-x86_64, url: 'https://x/l.tgz', cuda: '12.8', glibc: '2.39', runtime_url: 'https://x/rt.tgz'}
""")
    [src] = [e for e in s.engine_sources() if e.name == "llamacpp"]
    [v] = src.variants
    assert (v.cuda, v.glibc, v.runtime_url, src.digests_url) == ("12.8", "2.39", "https://x/rt.tgz",
                                                                 "https://api.github.com/repos/ggml-org/llama.cpp/releases/tags/b2")


def test_the_shipped_example_pins_engines_and_reads_its_requirements_file() -> None:
    s = load(ServerConfig, EXAMPLES / "server.yaml")
    vllm = next(e for e in s.engine_sources() if e.name == "vllm")
    cuda = next(v for v in vllm.variants if v.variant == "cuda-x86_64")
    assert cuda.requirements == ["vllm==0.32.0"], "comments and blank lines are not requirements"


def test_a_requirements_file_that_cannot_be_read_is_a_config_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        server(tmp_path, """engines:
  - name: vllm
    version: 0.32.0
    variants: [{variant: cpu-x86_64, requirements_file: nowhere.txt}]
""")
    assert "nowhere.txt" in str(e.value) and "cannot read" in str(e.value)


@pytest.mark.parametrize("text,words", [
    ("engines: [llamacpp, llamacpp]", "llamacpp named twice"),
    ("engines: [tgi]", "engines[0].literal['llamacpp','vllm','sglang','sim']: Input should be"),
    ("engines: [{name: llamacpp, version: ../../etc, variants: []}]", "version"),
    ("engines: [{name: llamacpp, version: b1, variants: [{variant: cpu-x86_64, url: 'https://x/a.tgz'}]}]",
     "needs the sha256"),
])
def test_an_engine_entry_that_cannot_be_trusted_is_refused_at_load(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(ConfigError) as e:
        server(tmp_path, text + "\n")
    assert words in str(e.value), str(e.value)
