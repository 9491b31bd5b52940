"""Which files of a hub repository's listing an engine needs: weights in one format from the top level, the
metadata beside them, each with its size and digest; and the listings refused, with the file named."""

from __future__ import annotations

import logging

import pytest
from huggingface_hub.hf_api import BlobLfsInfo, RepoSibling

from llmgw.control.hub.hub import choose_files
from llmgw.wire.hub import MAX_FILES

SHA256 = "ab" * 32
SHA1 = "cd" * 20


def lfs(name: str, size: int = 1000) -> RepoSibling:
    return RepoSibling(rfilename=name, size=size, blob_id="ef" * 20,
                       lfs=BlobLfsInfo(size=size, sha256=SHA256, pointer_size=130))


def small(name: str, size: int = 10) -> RepoSibling:
    return RepoSibling(rfilename=name, size=size, blob_id=SHA1, lfs=None)


def paths(siblings: list[RepoSibling]) -> set[str]:
    return {f.path for f in choose_files(siblings)}


META = [small("config.json"), small("generation_config.json"), small("tokenizer.json"),
        small("tokenizer_config.json"), small("special_tokens_map.json")]
NOISE = [small("README.md"), small(".gitattributes"), lfs("original/consolidated.00.pth"),
         small("original/params.json"), lfs("onnx/model.onnx"), lfs("model.gguf"), lfs("flax_model.msgpack"),
         lfs("tf_model.h5"), lfs("rust_model.ot"),
         lfs("training_args.bin"), lfs("optimizer.pt")]


def test_safetensors_when_there_are_both() -> None:
    listing = [lfs("model-00001-of-00002.safetensors"), lfs("model-00002-of-00002.safetensors"),
               small("model.safetensors.index.json"), lfs("pytorch_model-00001-of-00002.bin"),
               lfs("pytorch_model-00002-of-00002.bin"), small("pytorch_model.bin.index.json"), *META, *NOISE]
    assert paths(listing) == {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                              "model.safetensors.index.json", *(s.rfilename for s in META)}


def test_bin_when_there_is_no_safetensors() -> None:
    listing = [lfs("pytorch_model-00001-of-00002.bin"), lfs("pytorch_model-00002-of-00002.bin"),
               small("pytorch_model.bin.index.json"), *META, *NOISE]
    assert paths(listing) == {"pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin",
                              "pytorch_model.bin.index.json", *(s.rfilename for s in META)}


def test_hf_named_shards_win_over_a_consolidated_copy() -> None:
    listing = [lfs("consolidated.safetensors"), lfs("model-00001-of-00001.safetensors"), *META]
    assert "consolidated.safetensors" not in paths(listing)
    assert "consolidated.safetensors" in paths([lfs("consolidated.safetensors"), *META])


def test_tokenizer_variants_and_chat_templates() -> None:
    extra = ["tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja",
             "chat_template.json", "preprocessor_config.json", "qwen.tiktoken"]
    assert paths([lfs("model.safetensors"), *(small(n) for n in extra)]) == {"model.safetensors", *extra}


def test_each_file_carries_its_size_and_digest() -> None:
    files = {f.path: f for f in choose_files([lfs("model.safetensors", 5000), small("config.json", 42)])}
    assert (files["model.safetensors"].size, files["model.safetensors"].sha256) == (5000, SHA256)
    assert files["model.safetensors"].git_sha1 == ""
    assert (files["config.json"].size, files["config.json"].git_sha1, files["config.json"].sha256) == (42, SHA1, "")


def test_no_weights_names_what_there_is() -> None:
    with pytest.raises(ValueError, match=r"no weights.*model\.gguf"):
        choose_files([lfs("model.gguf"), *META])
    with pytest.raises(ValueError, match="no weights"):
        choose_files([lfs("original/model.safetensors"), small("model.safetensors.index.json")])


def test_missing_size_or_digest_is_refused() -> None:
    with pytest.raises(ValueError, match=r"no size or digest for 'model\.safetensors'"):
        choose_files([RepoSibling(rfilename="model.safetensors", size=None, blob_id=None, lfs=None)])
    with pytest.raises(ValueError, match=r"config\.json"):
        choose_files([lfs("model.safetensors"), RepoSibling(rfilename="config.json", size=3, blob_id=None, lfs=None)])


def test_a_path_no_node_would_write(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ValueError, match=r"weights file 'model weights\.safetensors'"):
        choose_files([lfs("model weights.safetensors"), lfs("model.safetensors")])
    with caplog.at_level(logging.WARNING):
        assert paths([lfs("model.safetensors"), small("x y.tiktoken")]) == {"model.safetensors"}
    assert "x y.tiktoken" in caplog.text


def test_too_many_files() -> None:
    shards = [lfs(f"model-{i:05d}-of-{MAX_FILES + 1:05d}.safetensors") for i in range(MAX_FILES + 1)]
    with pytest.raises(ValueError, match=f"more than {MAX_FILES}"):
        choose_files(shards)


@pytest.mark.parametrize("twice", [[lfs("model.safetensors", 1000), lfs("model.safetensors", 2000)],
                                   [small("config.json", 10), small("config.json", 99)]])
def test_a_file_listed_twice_is_refused_naming_it(twice: list[RepoSibling]) -> None:
    listing = [lfs("model-00001-of-00001.safetensors"), small("tokenizer.json"), *twice]
    with pytest.raises(ValueError, match=f"names '{twice[0].rfilename}' twice"):
        choose_files(listing)


def test_a_digest_in_capitals_is_the_same_digest() -> None:
    upper = RepoSibling(rfilename="model.safetensors", size=5, blob_id="EF" * 20,
                        lfs=BlobLfsInfo(size=5, sha256=SHA256.upper(), pointer_size=130))
    files = {f.path: f for f in choose_files([upper, RepoSibling(rfilename="config.json", size=3,
                                                                 blob_id=SHA1.upper(), lfs=None)])}
    assert (files["model.safetensors"].sha256, files["config.json"].git_sha1) == (SHA256, SHA1)


@pytest.mark.parametrize("bad, words", [
    (RepoSibling(rfilename="model.safetensors", size=-1, blob_id=None,
                 lfs=BlobLfsInfo(size=-1, sha256=SHA256, pointer_size=1)), "size -1"),
    (RepoSibling(rfilename="model.safetensors", size=2**60, blob_id=None,
                 lfs=BlobLfsInfo(size=2**60, sha256=SHA256, pointer_size=1)), f"size {2**60}"),
    (RepoSibling(rfilename="model.safetensors", size=10, blob_id=None,
                 lfs=BlobLfsInfo(size=10, sha256="not hex", pointer_size=1)), "digest 'not hex'"),
    (RepoSibling(rfilename="model.safetensors", size=10, blob_id=None,
                 lfs=BlobLfsInfo(size=99, sha256=SHA256, pointer_size=1)), "10 bytes and 99"),
])
def test_a_size_or_digest_no_file_has_is_refused_in_a_line(bad: RepoSibling, words: str) -> None:
    with pytest.raises(ValueError, match=r"the hub gave model\.safetensors") as e:
        choose_files([bad])
    assert words in str(e.value) and "\n" not in str(e.value) and "pydantic" not in str(e.value)


def test_files_coming_to_more_than_a_node_can_count_are_refused() -> None:
    huge = [lfs(f"model-{i}.safetensors", 2**50) for i in range(2)]
    with pytest.raises(ValueError, match="more than"):
        choose_files(huge)
