"""Audit: compare an engine's mask with the reference checker's on sampled steps.

The comparison is over the whole vocabulary (the reference walks it as a lazily built DFA), which covers
what the audit must check: the oracle token, every token the engine allows, and all the rest.
"""
from __future__ import annotations

import functools

import numpy as np

from gcdbench.parsers.base import mask_to_ids
from gcdbench.parsers.reference import DEAD, ReferenceChecker

MAX_EXAMPLES = 5
WS = b" \t\r\n"


# Documented differences between an engine's language and the reference's (README "Lexing differences").
# Each test gets (auditor, prefix, token bytes or None for EOS) for a token the reference allows and the
# engine blocks,
# and says whether that documented cause explains it. Anything not explained stays a disagreement.
def longest_match_lexing(aud, prefix: bytes, data: bytes) -> bool:
    """Lexer-based engines cut terminals by longest match: `SELECT count` + `FROM` is no `count FROM` split."""
    return not (aud.longest.is_sentence(prefix) if data is None else aud.longest.is_viable(prefix + data))


def standard_lexer(aud, prefix: bytes, data: bytes) -> bool:
    """PSC lexes like Lark's standard lexer: longest match over all terminals, keywords reserved, so
    `SELECT0` is one NAME and `count` is never a column name."""
    return not (aud.standard.is_sentence(prefix) if data is None else aud.standard.is_viable(prefix + data))


def trailing_ignore_after_final_sentence(aud, prefix: bytes, data: bytes) -> bool:
    """LLGuidance refuses ignored text after a sentence that no terminal can extend: the text is such a
    sentence followed by whitespace only (the cut may fall inside a terminal that itself ends in
    whitespace, like sp-op's `; `)."""
    if data is None:
        return False
    ref = aud.ref
    full = prefix + data
    k = len(full) - 1
    while k >= 0 and full[k] in WS:
        core = full[:k]
        if ref.is_sentence(core):
            state = ref.advance(ref.initial(), core)
            if all(b in WS for b in range(256) if ref.step(state, b) != DEAD):
                return True
        k -= 1
    return False


def dotless_i_case_fold(aud, prefix: bytes, data: bytes) -> bool:
    """Python's re (Lark, the reference) matches "i"i to the dotless ı (U+0131); LLGuidance does not."""
    return data is not None and b"\xc4" in data


def ascii_only_case_fold(aud, prefix: bytes, data: bytes) -> bool:
    """XGrammar's Grammar.from_lark folds ASCII only: no ſ (U+017F), K (U+212A), ı (U+0131)."""
    return data is not None and any(lead in data for lead in (b"\xc5", b"\xc4", b"\xe2"))


def known_differences(engine: str, options: dict | None = None) -> dict:
    options = options or {}
    if engine == "llguidance":
        return {"longest_match_lexing": longest_match_lexing,
                "trailing_ignore_after_final_sentence": trailing_ignore_after_final_sentence,
                "dotless_i_case_fold": dotless_i_case_fold}
    if engine in ("psc", "pre3"):   # pre3: with its lexer front end (Profile(lexing="standard"))
        return {"longest_match_lexing": longest_match_lexing, "standard_lexer": standard_lexer}
    if engine == "glrmask":
        return {"longest_match_lexing": longest_match_lexing, "dotless_i_case_fold": dotless_i_case_fold}
    if engine == "xgrammar" and options.get("grammar_form") == "lark":
        return {"ascii_only_case_fold": ascii_only_case_fold}
    return {}


@functools.lru_cache(maxsize=8)
def _checker(grammar, lexing="scannerless"):
    return ReferenceChecker(grammar, lexing)


class Auditor:
    def __init__(self, grammar, tokenizer, engine: str = "", options: dict | None = None):
        self.grammar = grammar
        self.ref = _checker(grammar)
        self.tok = tokenizer
        self.known = known_differences(engine, options)

    @functools.cached_property
    def longest(self) -> ReferenceChecker:
        """The same grammar read with longest-match lexing (built only when a classifier needs it)."""
        return _checker(self.grammar, "longest_match")

    @functools.cached_property
    def standard(self) -> ReferenceChecker:
        """The same grammar read as Lark's standard lexer would (all terminals compete, keywords reserved)."""
        return _checker(self.grammar, "standard")

    def explain(self, prefix: bytes, missing) -> tuple[int, dict]:
        """How many false blocks no documented difference explains, and counts per documented cause."""
        causes: dict[str, int] = {}
        unexplained = 0
        for t in missing:
            t = int(t)
            data = None if t == self.tok.eos_id else self.tok.token_bytes[t]
            why = next((k for k, f in self.known.items() if f(self, prefix, data)), None)
            if why is None:
                unexplained += 1
            else:
                causes[why] = causes.get(why, 0) + 1
        return unexplained, causes

    def reference_ids(self, prefix: bytes) -> np.ndarray:
        sid = self.ref.advance(self.ref.initial(), prefix)
        return np.array([], dtype=np.int64) if sid == DEAD else self.ref.full_mask_ids(sid, self.tok)

    def check(self, text: str, ids: list[int], audited: dict) -> list[dict]:
        rows = []
        for step in sorted(audited):
            prefix = self.tok.decode(ids[:step])
            got = mask_to_ids(np.asarray(audited[step], dtype=np.int32), self.tok.vocab_size)
            want = self.reference_ids(prefix)
            extra = np.setdiff1d(got, want, assume_unique=True)
            missing = np.setdiff1d(want, got, assume_unique=True)
            unexplained, causes = self.explain(prefix, missing)
            rows.append({
                "step": int(step), "prefix": prefix.decode("utf-8", "replace")[-200:],
                "agree_modulo_documented": bool(extra.size == 0 and unexplained == 0),
                "documented_causes": ", ".join(f"{k}: {v}" for k, v in sorted(causes.items())),
                "n_engine": int(got.size), "n_reference": int(want.size),
                "n_false_allow": int(extra.size), "n_false_block": int(missing.size),
                "agree": bool(extra.size == 0 and missing.size == 0),
                "false_allow_examples": [self._show(t) for t in extra[:MAX_EXAMPLES]],
                "false_block_examples": [self._show(t) for t in missing[:MAX_EXAMPLES]],
            })
        return rows

    def _show(self, t) -> str:
        t = int(t)
        if t == self.tok.eos_id:
            return "<EOS>"
        return repr(self.tok.token_bytes[t])[2:-1] or f"<special {t}>"
