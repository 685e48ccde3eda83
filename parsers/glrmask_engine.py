"""GLRMask (PyPI ``glrmask``: GLR parsing + a precompiled weighted automaton for masks) behind the engine
interface.

Three grammar forms, chosen by ``grammar_form``:

* ``inline_ignore`` (default): the grammar loaded with ``lark`` (templates expanded, EBNF operators
  flattened to BNF, priorities dropped: the reference ignores them too) and written back as flat Lark
  with no ``%ignore``: every terminal ``T`` is used through ``t__t: T | T Z_IGNORED``, so ignored text may
  follow any terminal but never come first. This is the reference checker's language (and the form the
  XGrammar EBNF converter writes); on the byte-level test grammars GLRMask then agrees with the reference
  at every step.
* ``normalized``: the same flat Lark, ``%ignore`` kept.
* ``lark``: the ``.lark`` source as is, read by GLRMask's own Lark reader. That reader has no templates
  (``_sep{x, sep}``) and no rule/terminal priorities; it refuses them (CompileError).

Language differences from the scannerless reference, in GLRMask's lexing (not in our conversion): it
lexes with longest match among the terminals the parser allows (``selectafrom t`` is refused where the
reference reads ``select a from t``; ``SELECTcount(*)`` is accepted), and with ``%ignore`` kept
(``lark``, ``normalized``) it accepts ignored text before the first terminal.

Init = Vocab + grammar compile (``Grammar.compile``: LR tables and, with the default ``auto`` strategy,
the parser DWA). EOS is not part of GLRMask's vocabulary here: it is allowed exactly when the state is
accepting.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from gcdbench.parsers.base import CompileError, Engine, GrammarSpec, Profile, option


class GLRMaskError(RuntimeError):
    """GLRMask panicked (a Rust panic surfaced as ``pyo3_runtime.PanicException``)."""


def _rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _peak_rss_mb() -> float:
    """High-water mark of this process's RSS (Linux: ru_maxrss is in kilobytes)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _is_panic(err: BaseException) -> bool:
    return type(err).__name__ == "PanicException"


# --------------------------------------------------------------------------------------------------
# .lark -> flat Lark for GLRMask
# --------------------------------------------------------------------------------------------------
def _lark_string(s: str) -> str:
    body = s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return f'"{body}"'


def _lark_regex(regex: str) -> str:
    """``regex`` as a Lark ``/.../`` literal: unescaped ``/`` and raw control characters escaped."""
    out, i = [], 0
    while i < len(regex):
        c = regex[i]
        if c == "\\" and i + 1 < len(regex):
            out.append(regex[i:i + 2])
            i += 2
            continue
        out.append({"/": "\\/", "\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c, c))
        i += 1
    return "/" + "".join(out) + "/"


def _rule_name(sym: str) -> str:
    """A valid Lark rule name (``_?[a-z][_a-z0-9]*``); Lark's generated ``__x`` names become ``z_x``."""
    import re

    name = re.sub(r"[^a-z0-9_]", "_", sym.lower())
    if name.startswith("__"):
        name = "z_" + name.lstrip("_")
    return name if name.lstrip("_")[:1].isalpha() else "r_" + name.lstrip("_")


def _term_name(sym: str) -> str:
    """A valid Lark terminal name (``_?[A-Z][_A-Z0-9]*``); ``__X`` becomes ``Z_X``."""
    import re

    name = re.sub(r"[^A-Z0-9_]", "_", sym.upper())
    if name.startswith("__"):
        name = "Z_" + name.lstrip("_")
    return name if name.lstrip("_")[:1].isalpha() else "T_" + name.lstrip("_")


def lark_to_glrmask_lark(spec: GrammarSpec, inline_ignore: bool = False) -> str:
    """``spec`` as flat Lark (BNF rules, one pattern per terminal, ``start`` as the start rule).

    With ``inline_ignore`` there is no ``%ignore``: each terminal ``T`` is used through a rule
    ``t__t: T | T Z_IGNORED`` where ``Z_IGNORED`` matches one or more ignored pieces, so ignored text may
    follow every terminal but never come first (the reference checker's language; the same form as the
    XGrammar EBNF converter's).
    """
    from gcdbench.parsers.convert import regex_with_explicit_classes
    from gcdbench.parsers.grammar import load_ir

    ir = load_ir(spec)
    names = {nt: _rule_name(nt) for nt in ir.nonterminals}
    names.update({t: _term_name(t) for t in ir.terminals})
    inline = bool(inline_ignore and ir.ignore)
    use = dict(names)
    if inline:
        for t in ir.terminals:
            if t not in ir.ignore:
                use[t] = "t__" + names[t].lower()
    emitted = [names[nt] for nt in ir.nonterminals]
    emitted += [names[t] for t in ir.terminals if not (inline and t in ir.ignore)]
    if inline:
        emitted += [use[t] for t in ir.terminals if t not in ir.ignore] + ["Z_IGNORED"]
    if len(set(emitted)) != len(emitted):
        raise CompileError("glrmask: symbol names collide after normalisation")
    lines = []
    if names[ir.start] != "start":
        if "start" in names.values():
            raise CompileError(f"glrmask: start symbol is {ir.start!r} but a rule named 'start' exists")
        lines.append(f"start: {names[ir.start]}")
    for nt in ir.nonterminals:
        alts = [" ".join(use[s] for s in r.expansion) for r in ir.by_origin[nt]]  # "" = empty alternative
        lines.append(f"{names[nt]}: " + " | ".join(alts))
    for t, term in ir.terminals.items():
        if inline and t in ir.ignore:
            continue
        if term.literal is not None:
            pat = _lark_string(term.literal) + ("i" if term.ignore_case else "")
        else:   # every class spelled out as Python's re reads it (GLRMask's own \\s and \\w are Rust's)
            pat = _lark_regex(regex_with_explicit_classes(t, term.regex, term.ignore_case))
        lines.append(f"{names[t]}: {pat}")
        if inline:
            lines.append(f"{use[t]}: {names[t]} | {names[t]} Z_IGNORED")
    if inline:
        alts = "|".join(f"(?:{regex_with_explicit_classes(t, ir.terminals[t].regex, ir.terminals[t].ignore_case)})"
                        for t in ir.ignore)
        lines.append(f"Z_IGNORED: {_lark_regex(f'(?:{alts})+')}")
    else:
        for t in ir.ignore:
            lines.append(f"%ignore {names[t]}")
    return "\n".join(lines) + "\n"


def lark_as_is(spec: GrammarSpec) -> str:
    if spec.start == "start":
        return spec.lark
    return f"start: {spec.start}\n{spec.lark}"


# --------------------------------------------------------------------------------------------------
@dataclass
class GLRMaskOptions:
    grammar_form: str = option("inline_ignore", "inline_ignore: the reference's language; normalized: flat Lark, "
                               "%ignore kept; lark: the source as is", choices=("inline_ignore", "normalized", "lark"))
    mask_strategy: str = option("auto", "GLRMask's mask strategy", choices=("auto", "parser_dwa", "token_trie"))
    boundary_mask_strategy: str = option("auto", "its mask strategy at terminal boundaries",
                                         choices=("auto", "parser_dwa", "token_trie"))
    parser_backend: str = option("lr_table", "token_trie only: the parser behind the token trie",
                                 choices=("lr_table", "template_dfa"))
    merge_equivalent_tokens: bool = option(False, "token_trie only: merge tokens the grammar cannot tell apart")


class GLRMaskEngine(Engine):
    name = "glrmask"
    plot_style = ("#00a6c8", ">")   # cyan, in every figure

    _STRATEGIES = ("auto", "parser_dwa", "token_trie")

    Options = GLRMaskOptions

    def version(self) -> str:
        import importlib.metadata

        return importlib.metadata.version("glrmask")

    def profile(self) -> Profile:
        """Each terminal takes its own longest match (Lark's ``dynamic`` lexing), Unicode simple case folding of
        string literals (regex terminals are written with Python re's classes spelled out); with ``%ignore``
        kept (``lark``, ``normalized``) ignored text may also come first."""
        return Profile(lexing="dynamic", case_fold="unicode_simple",
                       leading_ignore=self.opts["grammar_form"] != "inline_ignore")

    @classmethod
    def complexity(cls, ambiguous: bool = False) -> str:
        return "O(n^3)"

    def _strategies(self):
        import glrmask

        ms, bs = self.opts["mask_strategy"], self.opts["boundary_mask_strategy"]
        for what, v in (("mask_strategy", ms), ("boundary_mask_strategy", bs)):
            if v not in self._STRATEGIES:
                raise ValueError(f"glrmask: {what} must be one of {self._STRATEGIES}, not {v!r}")
        if ms == "token_trie":
            backend = {"lr_table": glrmask.ParserBackend.LR_TABLE, "template_dfa": glrmask.ParserBackend.TEMPLATE_DFA}
            if self.opts["parser_backend"] not in backend:
                raise ValueError(f"glrmask: parser_backend must be one of {sorted(backend)}")
            mask = glrmask.TokenTrie(parser_backend=backend[self.opts["parser_backend"]],
                                     merge_equivalent_tokens=bool(self.opts["merge_equivalent_tokens"]))
        else:
            mask = getattr(glrmask.MaskStrategy, ms.upper())
        return mask, getattr(glrmask.BoundaryMaskStrategy, bs.upper())

    def compile(self, grammar: GrammarSpec, tokenizer) -> None:
        import glrmask

        form = self.opts["grammar_form"]
        if form == "lark":
            self.source = lark_as_is(grammar)
        elif form in ("normalized", "inline_ignore"):
            self.source = lark_to_glrmask_lark(grammar, inline_ignore=form == "inline_ignore")
        else:
            raise ValueError(f"glrmask: grammar_form must be 'lark', 'normalized' or 'inline_ignore', not {form!r}")
        mask_strategy, boundary = self._strategies()
        rss_before = _rss_mb()
        t0 = time.perf_counter()
        vocab = glrmask.Vocab.from_id_to_bytes(
            {i: b for i, b in enumerate(tokenizer.token_bytes) if b and i != tokenizer.eos_id}
        )
        t1 = time.perf_counter()
        try:
            g = glrmask.Grammar.from_lark(self.source)
            self.constraint = g.compile(vocab, mask_strategy=mask_strategy, boundary_mask_strategy=boundary)
        except ValueError as err:
            raise CompileError(f"glrmask refused the grammar ({form} form): {err}") from err
        except BaseException as err:  # noqa: BLE001 - a Rust panic is a BaseException
            if _is_panic(err):
                raise GLRMaskError(f"glrmask panicked while compiling: {err}") from None
            raise
        t2 = time.perf_counter()
        rss_after = _rss_mb()
        self.eos_id = tokenizer.eos_id
        self.vocab_size = tokenizer.vocab_size
        self._eos_word = tokenizer.eos_id >> 5
        self._eos_bit = np.uint32(1 << (tokenizer.eos_id & 31)).view(np.int32)
        if self.constraint.mask_len() > (self.vocab_size + 31) // 32:
            raise CompileError("glrmask: its mask is wider than the vocabulary")
        self._info = {"grammar_form": form, "vocab_s": t1 - t0, "grammar_compile_s": t2 - t1,
                      "mask_strategy": self.opts["mask_strategy"],
                      "rss_before_mb": rss_before, "rss_after_mb": rss_after, "process_peak_rss_mb": _peak_rss_mb()}
        self.reset()

    def reset(self) -> None:
        self.state = self.constraint.start()
        self._ended = False

    def fill_mask(self, out: np.ndarray) -> None:
        if self._ended:
            out[:] = 0
            return
        try:
            self.state.fill_mask(out)  # writes every word of out (extra words zeroed)
        except BaseException as err:  # noqa: BLE001
            if _is_panic(err):
                raise GLRMaskError(f"glrmask panicked in fill_mask: {err}") from None
            raise
        if self.state.is_accepting():
            out[self._eos_word] |= self._eos_bit

    def commit(self, token_id: int) -> bool:
        token_id = int(token_id)
        if self._ended:
            return False
        if token_id == self.eos_id:
            self._ended = True
            return bool(self.state.is_accepting())
        try:
            return bool(self.state.commit_token(token_id))
        except BaseException as err:  # noqa: BLE001
            if _is_panic(err):
                raise GLRMaskError(f"glrmask panicked in commit: {err}") from None
            raise

    def info(self) -> dict:
        return dict(self._info)

    def fork(self) -> "GLRMaskEngine":
        """A new state of the same compiled constraint, at the empty prefix. GLRMask 0.5.0 has no batch call
        (a ``ConstraintState`` fills one mask), so ``fill_masks`` is the default loop, on one thread."""
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)
        other.opts = dict(self.opts)
        other.reset()
        return other
