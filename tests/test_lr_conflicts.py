"""PSC and Pre3 on a grammar with a shift/reduce conflict: refused by default with the option named, and with
``conflicts=shift`` the conflict is resolved as Lark's LALR parser resolves it (how seed 003 ran SynCode's Java and
Go grammars): the masks follow that parser, whose language here is smaller than the grammar's."""
from __future__ import annotations

import pytest

from gcdbench.parsers.base import CompileError, GrammarSpec, allocate_mask, mask_to_ids
from gcdbench.parsers.pre3.engine import Pre3Engine
from gcdbench.parsers.psc.engine import PSCEngine
from gcdbench.parsers.reference import ReferenceChecker

# After "a", reading "b": reduce p -> "a" (for "a b c") or shift "b" (for "a b d"). Shifting loses "a b c".
CONFLICT = GrammarSpec(name="sr_conflict", lark='start: p "b" "c" | q\np: "a"\nq: "a" "b" "d"\n')
ENGINES = [pytest.param(PSCEngine, id="psc"), pytest.param(Pre3Engine, id="pre3")]


def _allowed(eng, tok) -> set[bytes]:
    m = allocate_mask(tok.vocab_size)
    m[:] = -1
    eng.fill_mask(m)
    return {tok.token_bytes[i] for i in mask_to_ids(m, tok.vocab_size).tolist() if i != tok.eos_id}


@pytest.mark.parametrize("cls", ENGINES)
def test_shift_reduce_conflict_refused_by_default(cls, bytes_tokenizer):
    with pytest.raises(CompileError, match="conflicts=shift"):
        cls(cache=False).compile(CONFLICT, bytes_tokenizer)


@pytest.mark.parametrize("cls", ENGINES)
def test_conflicts_shift_follows_larks_parser(cls, bytes_tokenizer):
    eng = cls(cache=False, conflicts="shift")
    eng.compile(CONFLICT, bytes_tokenizer)
    assert eng.info()["shift_reduce_resolved_as_shift"] == 1
    for b in b"ab":
        assert eng.commit(b)
    assert _allowed(eng, bytes_tokenizer) == {b"d"}   # the parser's language: "a b c" is gone
    ref = ReferenceChecker(CONFLICT)
    assert ref.is_sentence(b"abc") and ref.is_sentence(b"abd")   # the grammar's language has both


@pytest.mark.parametrize("cls", ENGINES)
def test_reduce_reduce_still_refused(cls, bytes_tokenizer):
    rr = GrammarSpec(name="rr", lark='start: p | q\np: "a"\nq: "a"\n')
    with pytest.raises(CompileError, match="reduce/reduce|not LALR"):
        cls(cache=False, conflicts="shift").compile(rr, bytes_tokenizer)
