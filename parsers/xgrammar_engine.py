"""XGrammar (PyPI ``xgrammar``) behind the engine interface.

Three grammar forms, chosen by the ``grammar_form`` option: ``ebnf`` (default: the project's converter
from Lark's rule trees, ``%ignore`` inlined after each terminal, repetition kept), ``bnf`` (the same
language from Lark's expanded BNF: optional parts multiplied out, repetition as left recursion) and
``lark`` (XGrammar's own ``Grammar.from_lark`` import, which folds case ASCII-only). All are scannerless,
like the reference checker; results/README.md compares their speed.

Batch mode: ``fork()`` is a new ``GrammarMatcher`` over the same compiled grammar, and ``fill_masks`` is
XGrammar's own batch path, ``BatchGrammarMatcher.batch_fill_next_token_bitmask`` over the sequences' matchers,
with ``max_threads`` threads (the same option sets the compiler's threads).
"""
from __future__ import annotations

import numpy as np

from dataclasses import dataclass
from typing import Sequence

from gcdbench.parsers.base import CompileError, Engine, GrammarSpec, Profile, option


def tokenizer_info(tokenizer):
    """XGrammar's view of a :class:`~gcdbench.parsers.tokenizers.Tokenizer`: its raw token bytes, its width
    and its EOS as the only stop token; built once per process and vocabulary."""

    def build(tk):
        import xgrammar as xgr

        return xgr.TokenizerInfo(list(tk.token_bytes), xgr.VocabType.RAW, vocab_size=tk.vocab_size,
                                 stop_token_ids=[tk.eos_id])

    return tokenizer.view("xgrammar.TokenizerInfo", build)


@dataclass
class XGrammarOptions:
    grammar_form: str = option("ebnf", "ebnf: the project's Lark->EBNF converter (faster); bnf: from Lark's expanded "
                               "BNF; lark: XGrammar's own Grammar.from_lark; json_schema: XGrammar's own JSON Schema "
                               "compiler on the dataset's schemas (dataset=maskbench)",
                               choices=("ebnf", "bnf", "lark", "json_schema"))
    json_whitespace: str = option("compact", "grammar_form=json_schema: compact (separators ',' ':', no other "
                                  "whitespace, as dataset.serialize=compact) or flexible (any whitespace)",
                                  choices=("compact", "flexible"))
    json_strict: bool = option(True, "grammar_form=json_schema: XGrammar's strict_mode (its default): no property or "
                               "item the schema does not list, unless it allows them explicitly; false: JSON "
                               "Schema's defaults (additionalProperties true)")
    max_threads: int = option(1, "XGrammar's threads: its compiler and its batch matcher (batch.threads sets it)")
    cache: bool = option(False, "XGrammar's compiler cache (GrammarCompiler cache_enabled): a grammar compiled again "
                         "in the same process is reused", former="cache_enabled")


class XGrammarEngine(Engine):
    name = "xgrammar"
    plot_style = ("#8e44ad", "^")   # purple, in every figure
    Options = XGrammarOptions
    threads_option = "max_threads"

    def version(self) -> str:
        import importlib.metadata

        return importlib.metadata.version("xgrammar")

    @property
    def reads_json_schema(self) -> bool:
        return self.opts["grammar_form"] == "json_schema"

    def profile(self) -> Profile:
        """Scannerless like the harness. XGrammar's own Lark import folds case for ASCII letters only and reads
        ``\\w`` and ``\\d`` as ASCII (its ``\\s`` is ASCII plus U+00A0, which no profile expresses: the audit lists
        that residual difference); our EBNF and BNF forms spell Python re's classes and folds out."""
        if self.opts["grammar_form"] == "lark":
            return Profile(case_fold="ascii", regex_classes="ascii")
        return Profile()

    @classmethod
    def complexity(cls, ambiguous: bool = False) -> str:
        return "?"

    def compile(self, grammar: GrammarSpec, tokenizer) -> None:
        import torch
        import xgrammar as xgr

        from gcdbench.parsers.convert import lark_to_xgrammar_bnf, lark_to_xgrammar_ebnf

        form = self.opts["grammar_form"]
        try:
            if form == "ebnf":
                self.source = lark_to_xgrammar_ebnf(grammar)
                xg = xgr.Grammar.from_ebnf(self.source)
            elif form == "bnf":
                self.source = lark_to_xgrammar_bnf(grammar)
                xg = xgr.Grammar.from_ebnf(self.source)
            elif form == "lark":
                self.source = grammar.lark
                xg = xgr.Grammar.from_lark(grammar.lark)
            elif form == "json_schema":
                if grammar.json_schema is None:
                    raise CompileError(f"xgrammar: grammar_form=json_schema needs a JSON Schema, and {grammar.name} is "
                                       "a Lark grammar: use a dataset of schemas (dataset=maskbench)")
                self.source = grammar.json_schema
                compact = self.opts["json_whitespace"] == "compact"
                xg = xgr.Grammar.from_json_schema(grammar.json_schema, any_whitespace=not compact,
                                                  separators=(",", ":") if compact else None,
                                                  strict_mode=bool(self.opts["json_strict"]))
            else:
                raise ValueError(f"xgrammar: grammar_form must be 'ebnf', 'bnf', 'lark' or 'json_schema', not {form!r}")
            compiler = xgr.GrammarCompiler(
                tokenizer_info(tokenizer), max_threads=int(self.opts["max_threads"]),
                cache_enabled=bool(self.opts["cache"]),
            )
            self.compiled = compiler.compile_grammar(xg)
        except RuntimeError as err:
            raise CompileError(f"xgrammar refused the grammar ({form} form): {err}") from err
        self.matcher = xgr.GrammarMatcher(self.compiled, terminate_without_stop_token=False)
        self.vocab_size = tokenizer.vocab_size
        self._buf = xgr.allocate_token_bitmask(1, tokenizer.vocab_size)
        self._buf_np = self._buf.numpy()[0]
        self._torch = torch

    def reset(self) -> None:
        self.matcher.reset()

    def fill_mask(self, out: np.ndarray) -> None:
        self.matcher.fill_next_token_bitmask(self._buf)
        out[:] = self._buf_np[: out.shape[0]]

    def commit(self, token_id: int) -> bool:
        return bool(self.matcher.accept_token(int(token_id)))

    def info(self) -> dict:
        return {"grammar_form": self.opts["grammar_form"]}

    # -- batch ------------------------------------------------------------------------------------------
    def fork(self) -> "XGrammarEngine":
        """A new matcher over the same compiled grammar, at the empty prefix."""
        import xgrammar as xgr

        other = type(self)(**self.opts)
        other.source, other.compiled, other.vocab_size, other._torch = (self.source, self.compiled,
                                                                        self.vocab_size, self._torch)
        other.matcher = xgr.GrammarMatcher(self.compiled, terminate_without_stop_token=False)
        other._buf = xgr.allocate_token_bitmask(1, self.vocab_size)
        other._buf_np = other._buf.numpy()[0]
        other._batch = self._batcher()
        return other

    def _batcher(self):
        if getattr(self, "_batch", None) is None:
            import xgrammar as xgr

            self._batch = xgr.BatchGrammarMatcher(max_threads=int(self.opts["max_threads"]))
        return self._batch

    def fill_masks(self, seqs: Sequence["XGrammarEngine"], out: np.ndarray) -> None:
        """XGrammar's batch matcher over the sequences' matchers, straight into the rows of ``out``."""
        for s in seqs:
            if getattr(s, "compiled", None) is not self.compiled:
                raise ValueError("xgrammar: fill_masks takes this engine and its forks only (one compiled grammar)")
        if out.ndim != 2 or out.shape[0] < len(seqs) or not out.flags.c_contiguous or out.dtype != np.int32:
            raise ValueError(f"xgrammar: out must be a C-contiguous [>= {len(seqs)}, words] int32 array")
        self._batcher().batch_fill_next_token_bitmask([s.matcher for s in seqs], out)
