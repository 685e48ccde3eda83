"""SynCode adapter: the oracle path is allowed at every step (byte-level vocabulary and Qwen3), its mask store is
pickled and reused, refusals are typed, and its documented approximations still occur (so the README cannot go
stale): SynCode's masks are not exact for any language by design."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("syncode", reason="syncode is not installed: pip install --no-deps syncode==0.4.16 fire termcolor "
                                      "(README 'Other engines')")

from gcdbench.datasets.base import load_grammar  # noqa: E402
from gcdbench.parsers.base import CompileError, EngineError, GrammarSpec, Profile, allocate_mask, mask_to_ids  # noqa: E402
from gcdbench.parsers.reference import ReferenceChecker  # noqa: E402
from gcdbench.parsers.syncode_engine import SynCodeEngine  # noqa: E402

GRAMMARS = Path(__file__).parent / "grammars"
SAMPLE = Path(__file__).parents[1] / "datasets" / "sample"
TINY = GrammarSpec("tiny_sql", (GRAMMARS / "tiny_sql.lark").read_text())


def allowed(engine, tok) -> set[int]:
    mask = allocate_mask(tok.vocab_size)
    mask[:] = -1   # the engine must overwrite every word
    engine.fill_mask(mask)
    return set(mask_to_ids(mask, tok.vocab_size).tolist())


def run(engine, tok, samples):
    """Walk the samples; the oracle token (and EOS at the end) must be allowed at every step."""
    for sample in samples:
        engine.reset()
        for t in tok.encode(sample) + [tok.eos_id]:
            assert t in allowed(engine, tok), f"{sample!r}: oracle {t} masked"
            if t == tok.eos_id:
                break
            assert engine.commit(t)


@pytest.mark.parametrize("mode", ["grammar_mask", "grammar_strict"])
def test_oracle_path_and_store_cache(mode, tmp_path, bytes_tokenizer):
    engine = SynCodeEngine(mode=mode, cache_dir=str(tmp_path))
    engine.compile(TINY, bytes_tokenizer)
    assert engine.info()["store_cached"] is False and engine.info()["store_build_s"] is not None
    run(engine, bytes_tokenizer, (GRAMMARS / "tiny_sql.txt").read_text().splitlines())
    again = SynCodeEngine(mode=mode, cache_dir=str(tmp_path))
    again.compile(TINY, bytes_tokenizer)
    assert again.info()["store_cached"] is True and again.info()["store_mb"] > 0


def test_spider_oracle_path(tmp_path, bytes_tokenizer):
    engine = SynCodeEngine(cache_dir=str(tmp_path))
    engine.compile(load_grammar("spider"), bytes_tokenizer)
    run(engine, bytes_tokenizer, (SAMPLE / "queries.sql").read_text().splitlines()[:6])


def test_documented_approximations_occur(tmp_path, bytes_tokenizer):
    """grammar_mask over-approximates Lark's lexer language: after `select` it allows a digit (`select0` is one
    NAME for Lark's lexer, which cannot start a query); the leading whitespace Lark's lexer skips is allowed."""
    tok = bytes_tokenizer
    standard = ReferenceChecker(TINY, Profile(lexing="standard"))
    engine = SynCodeEngine(cache_dir=str(tmp_path))
    engine.compile(TINY, tok)
    assert ord(" ") in allowed(engine, tok)
    for t in b"select":
        assert engine.commit(t)
    assert ord("0") in allowed(engine, tok) and not standard.is_viable(b"select0")


def test_refusals_are_typed(tmp_path, bytes_tokenizer):
    engine = SynCodeEngine(cache_dir=str(tmp_path))
    with pytest.raises(CompileError, match="syncode refused"):   # reduce/reduce conflict: not LALR(1)
        engine.compile(GrammarSpec("rr", 'start: a | b\na: "x"\nb: "x"\n'), bytes_tokenizer)
    with pytest.raises(ValueError, match=r"mode='exact' is not allowed; valid: \['grammar_mask'"):
        SynCodeEngine(mode="exact")
    engine.compile(TINY, bytes_tokenizer)
    for t in b"select from t":   # FROM where a column must come: SynCode's parser gives up on the prefix
        engine.commit(t)
    with pytest.raises(EngineError, match="cannot parse"):
        allowed(engine, bytes_tokenizer)


@pytest.mark.slow
def test_qwen3_oracle_path(tmp_path, qwen3_tokenizer):
    """The mask store over Qwen3's 151,936 ids (a small grammar, so the store builds in seconds)."""
    grammar = GrammarSpec("words", 'start: WORD ("-" WORD)* "."\nWORD: /[a-z]+/\n')
    engine = SynCodeEngine(cache_dir=str(tmp_path))
    engine.compile(grammar, qwen3_tokenizer)
    run(engine, qwen3_tokenizer, ["ab-cd.", "hello-world-again."])
    engine.reset()
    got = allowed(engine, qwen3_tokenizer)
    assert qwen3_tokenizer.encode("hello")[0] in got and qwen3_tokenizer.eos_id not in got
