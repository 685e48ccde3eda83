"""SynCode (PyPI ``syncode``: Lark LALR(1) parsing + a precomputed DFA mask store) behind the engine interface.

SynCode reads the ``.lark`` source itself (its own copy of Lark, ``lexer="basic"``, ``parser="lalr"``), so it
takes LALR(1) grammars only; a conflict is a CompileError. Its mask store (for every terminal-DFA state and
next terminal, the tokens that fit) is built from a Hugging Face tokenizer, here the offline one of
:mod:`gcdbench.parsers.hf_tokenizer`, and pickled into its cache (``$GCDBENCH_CACHE/syncode``): the store build
is the init time of a cold compile, a cached store is loaded. Each mask is what SynCode's logits processor does
per step: decode the whole prefix, lex it with Lark's lexer, advance the incremental LALR parser, and look the
mask up from the remainder's DFA states and the acceptable terminal sequences (``GrammarConstrainer``).

Its language is not the reference's, by design: Lark's basic lexer (all terminals compete, longest match,
keywords reserved; ignored text may also come first), and the mask is an approximation of that language:
``grammar_mask`` mode (SynCode's default) over-approximates (it looks two terminals ahead), ``grammar_strict``
under-approximates. Seen on Spider over Qwen3: after a terminal that could still go on (``SELECT``) it refuses a
newline or carriage return while it allows a space or tab (its lookahead through the ignored terminal finds no
entry: the mask store keys the next terminals by the parse table, where ignored terminals never occur), and it
folds case ASCII-only in the mask store (``ſ``, ``ı``, ``K`` refused). An all-blocking mask is returned as it is (SynCode's processor would then leave the logits
unmasked); a prefix its parser cannot parse is an EngineError (SynCode would fall back to unconstrained
decoding). SynCode needs ``transformers``, ``torch``, ``regex``, ``interegular``, ``tqdm`` and ``fire``; its own
pins (``transformers==4.53.2``) clash with the project's, so it is installed with ``--no-deps``, and its wheel's stray
top-level ``tests`` package (which shadows the project's) is removed (README).
"""
from __future__ import annotations

import importlib.util
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gcdbench.parsers.base import CompileError, Engine, EngineError, GrammarSpec, Profile, option

MISSING = ("engine syncode needs the syncode package: pip install --no-deps syncode==0.4.16 fire termcolor, then remove "
           "the top-level 'tests' package it installs (see README 'Other engines')")


def _import_syncode():
    """Import SynCode without the side effect of its package __init__ (it reconfigures the root logger)."""
    import logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    import syncode  # noqa: F401  (its __init__ installs a stdout handler on the root logger)

    root.handlers[:] = handlers
    root.setLevel(level)
    import syncode.common as common
    import syncode.mask_store.mask_store as mask_store
    from syncode.grammar_mask.grammar_constrainer import GrammarConstrainer
    from syncode.mask_store.byte_tokenizer import ByteTokenizer
    from syncode.parsers.grammars import Grammar

    # the store build draws a tqdm progress bar on stderr; engines never print
    if not getattr(mask_store.tqdm, "_gcdbench_quiet", False):
        base = mask_store.tqdm

        def quiet(*args, **kwargs):
            kwargs["disable"] = True
            return base(*args, **kwargs)

        quiet._gcdbench_quiet = True
        mask_store.tqdm = quiet
    return common, GrammarConstrainer, ByteTokenizer, Grammar


@dataclass
class SynCodeOptions:
    mode: str = option("grammar_mask", "grammar_mask: SynCode's default (over-approximates); grammar_strict: "
                       "under-approximates", choices=("grammar_mask", "grammar_strict"))
    parser: str = option("lalr", "lalr, or lr (LR(1))", choices=("lalr", "lr"))
    cache: bool = option(True, "pickle the mask store into cache_dir and reuse it (init then only loads it)",
                         former="use_cache")
    cache_dir: str | None = option(None, "where the mask store is kept; null: $GCDBENCH_CACHE/syncode")


class SynCodeEngine(Engine):
    name = "syncode"
    plot_style = ("#a8a800", "*")   # olive, in every figure
    artifact_keys = {"Mask store MB": ("store_mb",), "Store build s": ("store_build_s",)}

    Options = SynCodeOptions

    @classmethod
    def missing(cls) -> str | None:
        absent = importlib.util.find_spec("syncode") is None or importlib.util.find_spec("fire") is None
        return MISSING if absent else None

    def version(self) -> str:
        import importlib.metadata

        return importlib.metadata.version("syncode")

    @classmethod
    def complexity(cls, ambiguous: bool = False) -> str:
        return "O(n)"   # the whole prefix is decoded and re-lexed at every step (parser states are memoised)

    def profile(self) -> Profile:
        return Profile(lexing="standard", leading_ignore=True, case_fold="ascii")   # the store folds ASCII only

    def _cache_dir(self) -> Path:
        from gcdbench.parsers.base import cache_dir_of

        return cache_dir_of("syncode", self.opts["cache_dir"])

    def compile(self, grammar: GrammarSpec, tokenizer) -> None:
        import torch

        from gcdbench.parsers.hf_tokenizer import load_from_hf_cache

        mode, parser = self.opts["mode"], self.opts["parser"]
        common, GrammarConstrainer, ByteTokenizer, Grammar = _import_syncode()
        cache = self._cache_dir()
        cache.mkdir(parents=True, exist_ok=True)
        common.SYNCODE_CACHE = str(cache) + os.sep   # SynCode joins paths by string concatenation
        text = grammar.lark if grammar.start == "start" else f"start: {grammar.start}\n{grammar.lark}"
        hf = load_from_hf_cache(tokenizer)
        sgrammar = Grammar(text)
        stores = cache / "mask_stores" / type(hf).__name__
        store = stores / f"{mode}_{sgrammar.hash()}_{hf.vocab_size}.pkl"
        self.store_cached = bool(self.opts["cache"]) and store.exists()
        t0 = time.perf_counter()
        try:
            self.gc = GrammarConstrainer(sgrammar, hf, ByteTokenizer(hf), use_cache=bool(self.opts["cache"]),
                                         parse_output_only=False, batch_size=1, parser=parser, mode=mode)
        except RecursionError as err:   # seen on the induced TreeBank grammar (815 lines)
            raise CompileError(f"syncode: Lark's {parser.upper()} table construction exceeded Python's recursion "
                               f"limit on this grammar ({err})") from err
        except Exception as err:   # Lark's GrammarError (conflicts), interegular's errors on unsupported regexes
            raise CompileError(f"syncode refused the grammar ({parser}): {type(err).__name__}: {str(err)[:2000]}") from err
        self.store_build_s = None if self.store_cached else round(time.perf_counter() - t0, 3)
        self.store_mb = round(store.stat().st_size / 2**20, 2) if store.exists() else None
        self.torch = torch
        self.vocab_size = tokenizer.vocab_size
        self.ids: list[int] = []
        self._bits = np.zeros(((self.vocab_size + 31) // 32) * 32, dtype=bool)

    def reset(self) -> None:
        self.gc.reset()
        self.ids = []

    def fill_mask(self, out: np.ndarray) -> None:
        gc = self.gc
        text, rest = gc._get_partial_outputs(self.torch.tensor([self.ids], dtype=self.torch.long))[0]
        res, failed = gc._parse_partial_output(0, text, rest, accepted_generation=False)
        if failed:
            raise EngineError("syncode: its parser cannot parse the prefix (SynCode would fall back to "
                              "unconstrained decoding)")
        allowed = gc.dfa_mask_store.get_accept_mask(res).numpy()
        n = min(len(allowed), self.vocab_size)
        self._bits[:n] = allowed[:n]
        out[:] = np.packbits(self._bits, bitorder="little").view(np.int32)[: out.shape[0]]

    def commit(self, token_id: int) -> bool:
        # SynCode keeps no per-token state to refuse with: the next mask re-reads the whole prefix
        self.ids.append(int(token_id))
        return True

    def fork(self) -> "SynCodeEngine":
        """Not available: SynCode's incremental parser cannot be copied (``copy.deepcopy`` fails on the ``re``
        module its Lark lexer holds, and with that module shared it breaks Lark's parse table), and sharing it
        between sequences would share its parser state. Batch mode then compiles a copy per sequence."""
        raise NotImplementedError("syncode: its incremental parser cannot be copied; batch mode compiles copies")

    def info(self) -> dict:
        return {"mode": self.opts["mode"], "parser": self.opts["parser"], "store_cached": self.store_cached,
                "store_build_s": self.store_build_s, "store_mb": self.store_mb}
