"""Sampled decoding (datasets/sampled.py): sequences are drawn from the reference's masks, are in the language,
are reproducible from their seed, replay through the ordinary runner token for token, and stale or mismatched
files fail with a message that says what to do. Tiny files are generated here (byte vocabulary)."""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gcdbench.datasets import sampled
from gcdbench.datasets.registry import load_dataset
from gcdbench.parsers.base import Profile
from gcdbench.parsers.reference import DEAD, ReferenceChecker

REPO = Path(__file__).resolve().parents[1]
STORED = sorted(sampled.SAMPLED_DIR.glob("*.json")) if sampled.SAMPLED_DIR.exists() else []
PARAMS = sampled.SamplerParams(max_target=24)


def _generate(source: str, tok, n=3, seed=0, params=PARAMS, **dcfg):
    ds = load_dataset({"name": source, **dcfg}, data_root="unused", n=None)
    return ds, sampled.generate(ds, tok, n=n, seed=seed, params=params)


@pytest.mark.parametrize("source,dcfg", [("sample", {}), ("ambiguous_expr", {"lengths": [5, 9, 13]}),
                                         ("json", {}), ("lark", {})])
def test_sequences_are_in_the_language_and_reproducible(source, dcfg, bytes_tokenizer):
    ds, seqs = _generate(source, bytes_tokenizer, **dcfg)
    assert [s["id"] for s in seqs] == ["s000", "s001", "s002"]
    for s in seqs:
        assert sampled.check_sequence(ds.grammar, bytes_tokenizer, s["ids"]) is None
        assert s["text"].encode() == bytes_tokenizer.decode(s["ids"])
        assert len(s["ids"]) >= min(s["target_len"], 1)
    gold = {bytes_tokenizer.decode(bytes_tokenizer.encode(x.text)) for x in ds.samples}
    assert not all(s["text"].encode() in gold for s in seqs)   # off the gold path
    _, again = _generate(source, bytes_tokenizer, **dcfg)
    assert [s["ids"] for s in again] == [s["ids"] for s in seqs]
    _, other = _generate(source, bytes_tokenizer, seed=1, **dcfg)
    assert [s["ids"] for s in other] != [s["ids"] for s in seqs]


def test_the_scannerless_mode_may_glue_what_lexers_split(bytes_tokenizer):
    params = sampled.SamplerParams(max_target=16, lexing="scannerless")
    ds, seqs = _generate("sample", bytes_tokenizer, n=2, params=params)
    for s in seqs:
        assert sampled.check_sequence(ds.grammar, bytes_tokenizer, s["ids"], ("scannerless",)) is None
    with pytest.raises(ValueError, match="lexing"):
        sampled.generate(ds, bytes_tokenizer, 1, params=sampled.SamplerParams(lexing="maximal"))


def test_the_standard_mode_gives_sequences_a_standard_lexer_reads(bytes_tokenizer):
    params = sampled.SamplerParams(max_target=16, lexing="standard")
    ds, seqs = _generate("sample", bytes_tokenizer, n=2, params=params)
    for s in seqs:
        assert sampled.check_sequence(ds.grammar, bytes_tokenizer, s["ids"], ("scannerless", "standard")) is None


@pytest.mark.parametrize("source,lexing", [("sample", "longest_match"), ("sample", "scannerless"),
                                           ("json", "longest_match"), ("lark", "longest_match"),
                                           ("sample_pos", "scannerless"), ("ambiguous_ternary", "scannerless")])
def test_completer_finishes_every_prefix(source, lexing):
    """From prefixes of real samples the completion is found, makes a sentence, and is short."""
    ds = load_dataset({"name": source}, data_root="unused", n=4, seed=3)
    rc = ReferenceChecker(ds.grammar, Profile(lexing=lexing))
    comp = sampled.Completer(rc)
    rng = random.Random(0)
    for s in ds.samples:
        b = s.text.encode()
        for cut in sorted(rng.sample(range(len(b)), min(6, len(b)))):
            sid = rc.advance(rc.initial(), b[:cut])
            assert sid != DEAD
            text = comp.complete(sid)
            assert text is not None and rc.accepts(rc.advance(sid, text)), (b[:cut], text)
            assert len(text) <= len(b) - cut + 40, (b[:cut], text)


def test_completer_finishes_a_character_begun_by_a_token():
    from gcdbench.datasets.base import load_grammar

    rc = ReferenceChecker(load_grammar("json"), Profile(lexing="longest_match"))
    sid = rc.advance(rc.initial(), '["é'.encode()[:-1])   # inside the two bytes of é
    text = sampled.Completer(rc).complete(sid)
    assert rc.accepts(rc.advance(sid, text)) and text[:1] in bytes(range(0x80, 0xC0))


@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory, bytes_tokenizer):
    ds, seqs = _generate("sample", bytes_tokenizer, n=3)
    path = tmp_path_factory.mktemp("sampled") / "sample.bytes.json"
    sampled.write_sampled(path, "sample", ds, bytes_tokenizer, seqs, 0, PARAMS, 1.0)
    return path


def test_file_round_trip_and_loader(tiny_file, bytes_tokenizer):
    doc = sampled.read_sampled(tiny_file)
    assert doc["format"] == sampled.FORMAT and doc["seed"] == 0 and doc["tokenizer"] == "bytes"
    ds = load_dataset({"name": "sampled", "source": "sample", "tokenizer": "bytes", "file": str(tiny_file)},
                      data_root="unused")
    assert ds.name == "sample_sampled" and [s.id for s in ds.samples] == ["s000", "s001", "s002"]
    for s, d in zip(ds.samples, doc["sequences"]):
        assert s.ids(bytes_tokenizer) == d["ids"]
        pieces = ds.meta["pieces"][s.id]   # token texts for the report (bytes of a split character escaped)
        assert len(pieces) == len(d["ids"])
        # each token's text, a byte of a split character escaped: joined they give the text back when it is ASCII
        assert pieces == [bytes([b]).decode("utf-8", "backslashreplace") for b in d["ids"]]
        assert ("".join(pieces) == s.text) == s.text.isascii()


def test_loader_errors_say_what_to_do(tiny_file, tmp_path, qwen3_tokenizer):
    base = {"name": "sampled", "source": "sample", "file": str(tiny_file)}
    with pytest.raises(ValueError, match="holds bytes token ids, but this run uses tokenizer=qwen3"):
        load_dataset({**base, "tokenizer": "qwen3"}, data_root="unused")
    stale = json.loads(tiny_file.read_text())
    stale["grammar_key"] = "0" * 16
    (tmp_path / "stale.json").write_text(json.dumps(stale))
    with pytest.raises(ValueError, match="regenerate it: python -m gcdbench.datasets.sampled"):
        load_dataset({**base, "tokenizer": "bytes", "file": str(tmp_path / "stale.json")}, data_root="unused")
    with pytest.raises(FileNotFoundError, match="gcdbench.datasets.sampled"):
        load_dataset({**base, "tokenizer": "bytes", "file": str(tmp_path / "none.json")}, data_root="unused")
    with pytest.raises(ValueError, match="unknown source dataset"):
        load_dataset({**base, "source": "nope", "tokenizer": "bytes"}, data_root="unused")
    ds = load_dataset({**base, "tokenizer": "bytes"}, data_root="unused")
    with pytest.raises(ValueError, match="tokenizer=bytes"):
        ds.samples[0].ids(qwen3_tokenizer)


def test_runner_replays_the_stored_tokens(tiny_file, tmp_path):
    from hydra import compose, initialize_config_dir

    from gcdbench.experiments.config import register
    from gcdbench.experiments.runner import run

    register()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["engine=xgrammar", "dataset=sampled", "dataset.source=sample",
                                           f"dataset.file={tiny_file}", "tokenizer=bytes", f"out_dir={tmp_path}",
                                           "progress=false", "audit.per_sample=3"])
    out = run(cfg)
    assert out.parent.parent.name == "sample_sampled"
    doc = sampled.read_sampled(tiny_file)
    steps = pd.read_parquet(out / "steps.parquet")
    for seq in doc["sequences"]:
        st = steps[steps["sample_id"] == seq["id"]].sort_values("step")
        assert len(st) == len(seq["ids"]) + 1 and st["oracle_allowed"].all()
        assert int(st["prefix_bytes"].iloc[-1]) == len(seq["text"].encode())
    meta = json.loads((out / "run.json").read_text())
    assert meta["outcomes"] == {"ok": 3} and meta["audit"]["agree"] == meta["audit"]["steps"]


def test_dataset_configs_name_their_source():
    from omegaconf import OmegaConf

    from gcdbench.datasets.registry import datasets

    for p in sorted((REPO / "conf" / "dataset").glob("*_sampled.yaml")):
        cfg = OmegaConf.load(p)   # a preset of the sampled node: its defaults line and the source it changes
        assert list(cfg.defaults) == ["sampled", "_self_"] and p.stem == f"{cfg.source}_sampled"
        assert cfg.source in datasets() and cfg.source != "sampled"


@pytest.mark.slow
@pytest.mark.parametrize("path", STORED, ids=[p.name for p in STORED])
def test_stored_sequences_match_their_grammar_and_language(path):
    """Every committed file: drawn from the current grammar, every sequence in the language (scannerless and under
    the reading it was drawn with)."""
    from conftest import _data_root

    from gcdbench.datasets.base import DataMissing
    from gcdbench.parsers.tokenizers import load_tokenizer

    doc = sampled.read_sampled(path)
    try:
        source = sampled.load_source(doc["source"], _data_root())
    except DataMissing as err:
        pytest.skip(f"the source's data is not here: {err}")
    assert doc["grammar_key"] == source.grammar.key(), f"stale: regenerate with {doc['command']}"
    tok = load_tokenizer(doc["tokenizer"])
    assert doc["tokenizer_key"] == tok.key()
    assert len(doc["sequences"]) == doc["n"]
    for s in doc["sequences"]:
        lexings = tuple(dict.fromkeys(("scannerless", doc["params"]["lexing"])))
        assert sampled.check_sequence(source.grammar, tok, s["ids"], lexings) is None, s["id"]
    lengths = np.array([len(s["ids"]) for s in doc["sequences"]])
    assert lengths.min() >= 1
