"""llama.cpp adapter, its vocabulary-only GGUF and the Lark -> GBNF converter: masks against the reference on
small grammars (byte-level vocabulary) and on Spider steps over Qwen3, with llama.cpp's own differences each
asserted to occur (so they cannot go stale), typed refusals, forks."""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import pytest

from gcdbench.datasets.base import load_grammar
from gcdbench.parsers.base import CompileError, GrammarSpec, allocate_mask, mask_to_ids
from gcdbench.parsers.reference import ReferenceChecker

GRAMMARS = Path(__file__).parent / "grammars"
SAMPLE = Path(__file__).parents[1] / "datasets" / "sample"
CASES = {
    "tiny_sql": ((GRAMMARS / "tiny_sql.lark").read_text(), (GRAMMARS / "tiny_sql.txt").read_text().splitlines()),
    "words": ('start: WORD ("-" WORD)* "."\nWORD: /[a-z]+/\n', ["ab-c.", "x."]),
    "spider": (load_grammar("spider").lark, (SAMPLE / "queries.sql").read_text().splitlines()[:6]),
}


llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed: pip install -e \".[llamacpp]\" "
                                                    "(builds llama.cpp; README 'Other engines')")
pytest.importorskip("gguf", reason="gguf is not installed: pip install -e \".[llamacpp]\"")

from gcdbench.parsers.llamacpp_engine import LlamaCppEngine  # noqa: E402


@pytest.fixture
def engine(tmp_path):
    e = LlamaCppEngine(cache_dir=str(tmp_path))
    yield e
    e.close()


def allowed(engine, tok) -> set[int]:
    mask = allocate_mask(tok.vocab_size)
    mask[:] = -1   # the engine must overwrite every word
    engine.fill_mask(mask)
    return set(mask_to_ids(mask, tok.vocab_size).tolist())


def llamacpp_difference(prefix: bytes, data: bytes | None, engine_only: bool) -> str | None:
    """llama.cpp's own UTF-8 reading (module docstring of the adapter), or None."""
    if data is not None and not engine_only and data.startswith(b"\x00"):
        return "nul"
    if data is not None and engine_only and any(b >= 0xF5 for b in data):
        return "f5_ff_lead"
    return None


@pytest.mark.parametrize("case", sorted(CASES))
def test_masks_equal_reference_but_for_llamacpp_utf8(case, engine, bytes_tokenizer):
    text, samples = CASES[case]
    grammar = GrammarSpec(case, text)
    engine.compile(grammar, bytes_tokenizer)
    ref = ReferenceChecker(grammar)
    tok = bytes_tokenizer
    seen = set()
    for sample in samples:
        engine.reset()
        prefix = b""
        for t in tok.encode(sample) + [tok.eos_id]:
            got = allowed(engine, tok)
            want = set(ref.full_mask_ids(ref.advance(ref.initial(), prefix), tok).tolist())
            for i in got ^ want:
                data = None if i == tok.eos_id else tok.token_bytes[i]
                why = llamacpp_difference(prefix, data, i in got)
                assert why, f"after {prefix!r}: {data!r} {'engine only' if i in got else 'reference only'}"
                seen.add(why)
            assert t in got
            if t == tok.eos_id:
                break
            assert engine.commit(t)
            prefix += tok.token_bytes[t]
    if case in ("tiny_sql", "spider"):   # both have string literals: the differences must still occur
        assert seen == {"nul", "f5_ff_lead"}


def test_refusals_are_typed(engine, bytes_tokenizer):
    with pytest.raises(CompileError, match="left recursion"):
        engine.compile(GrammarSpec("amb", (GRAMMARS / "ambiguous.lark").read_text()), bytes_tokenizer)
    with pytest.raises(CompileError, match="lookahead or lookbehind has no EBNF translation"):
        engine.compile(GrammarSpec("g", 'start: A\nA: /a(?=b)/\n'), bytes_tokenizer)


def test_commit_refuses_without_aborting_and_fork(engine, bytes_tokenizer):
    engine.compile(GrammarSpec("w", 'start: WORD ("-" WORD)* "."\nWORD: /[a-z]+/\n'), bytes_tokenizer)
    assert engine.commit(ord("a"))
    other = engine.fork()
    assert not engine.commit(ord("A"))   # llama.cpp itself would abort the process on this accept
    assert engine.commit(ord("."))
    assert allowed(engine, bytes_tokenizer) == {bytes_tokenizer.eos_id}
    assert allowed(other, bytes_tokenizer) == set(range(ord("a"), ord("z") + 1))
    other.close()


@pytest.mark.slow
def test_qwen3_gguf_and_spider_steps(engine, qwen3_tokenizer):
    """The vocabulary GGUF tokenizes like our encoder; Spider masks over Qwen3 equal the reference's but for
    llama.cpp's EOG-by-text token ``</s>``, allowed exactly where EOS is."""
    tok = qwen3_tokenizer
    grammar = load_grammar("spider")
    engine.compile(grammar, tok)
    lc = engine.lc
    for s in ["SELECT count(*) FROM singer WHERE age > 20", "Héllo wörld 你好 \n\n  x"]:
        buf = (ctypes.c_int32 * 256)()
        n = lc.llama_tokenize(engine.vocab, s.encode(), len(s.encode()), buf, 256, False, False)
        assert list(buf[:n]) == tok.encode(s)
    eog = engine.info()["eog_text_tokens"]
    assert [tok.token_bytes[i] for i in eog] == [b"</s>"]
    ref = ReferenceChecker(grammar)
    for query in (SAMPLE / "queries.sql").read_text().splitlines()[:2]:
        engine.reset()
        prefix = b""
        for t in tok.encode(query) + [tok.eos_id]:
            mask = allocate_mask(tok.vocab_size)
            engine.fill_mask(mask)
            got = mask_to_ids(mask, tok.vocab_size)
            want = ref.full_mask_ids(ref.advance(ref.initial(), prefix), tok)
            expected = np.union1d(want, eog) if tok.eos_id in want else want
            assert np.array_equal(got, expected), f"after {prefix!r}: {np.setxor1d(got, expected)[:10]}"
            if t == tok.eos_id:
                break
            assert engine.commit(t)
            prefix += tok.token_bytes[t]
