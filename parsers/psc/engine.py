"""PSC (parser stack classification) as the ``psc`` engine. See ``parsers/psc/README.md``.

Batch mode: ``fork()`` shares the compiled artifact (and the cache of mask unions) and owns a lexer state and an
LR stack; ``fill_masks`` walks each sequence's stack (Python, per sequence) and then writes every row whose mask
is one precomputed mask with one vectorised gather from the mask table (single-threaded)."""
from __future__ import annotations

import time
from dataclasses import dataclass

from typing import Sequence

import numpy as np

from gcdbench.parsers.artifacts import artifact_path, load_artifact, save_artifact
from gcdbench.parsers.base import CompileError, Engine, GrammarSpec, Profile, n_mask_words, option
from gcdbench.parsers.lr.lexer import ByteLexer, final_terminal, lex_bytes
from gcdbench.parsers.lr.tokens import TokenJobs
from gcdbench.parsers.psc.build import (END, Progress, _Classifier, lalr_tables, minimize_classifier,
                                        table_from_plain, table_to_plain)

FORMAT = 5   # bump when the cached artifact changes


def _pack(ids: np.ndarray, n_words: int) -> np.ndarray:
    bits = np.zeros(n_words * 32, dtype=np.uint8)
    bits[ids] = 1
    return np.packbits(bits, bitorder="little").view(np.int32)


def build_artifact(grammar: GrammarSpec, tokenizer, minimize: bool = True, **options) -> dict:
    """The compiled PSC artifact. ``options``: :class:`PSCOptions` by name, each one not given at its declared
    default (the one place defaults are written). Reports progress (``gcdbench.psc`` log records) and stays within
    its bounds: ``max_build_s`` (CompileTimeout), ``max_lexer_states`` and ``max_states`` (CompileError).
    ``conflicts="shift"`` takes Lark's tables with its shift/reduce conflicts resolved as shift. ``minimize=False``
    keeps the stack classifier unminimised (not an engine option: the tests' reference for minimisation)."""
    from gcdbench.parsers.grammar import load_ir

    o = PSCEngine.check_options(options)
    max_build_s, max_states, leading_ignore = float(o["max_build_s"]), int(o["max_states"]), bool(o["leading_ignore"])
    lalr_timeout_s, max_lexer_states, conflicts = float(o["lalr_timeout_s"]), int(o["max_lexer_states"]), o["conflicts"]

    load_ir(grammar)   # the harness's loader first: a grammar it cannot read is the same refusal for every engine
    t0 = time.monotonic()
    progress = Progress(t0 + max_build_s, max_build_s)
    table, terms, ignore, n_shift = lalr_tables(grammar, timeout_s=min(lalr_timeout_s, max_build_s),
                                                conflicts=conflicts)
    lexer = ByteLexer(terms, ignore, leading_ignore=leading_ignore, max_states=max_lexer_states, progress=progress)
    names = lexer.names
    n_t = len(names)
    if n_t >= 4095:
        raise CompileError(f"psc: {n_t} terminals; at most 4094 supported")
    end_t = n_t
    t_lex = time.monotonic()

    vocab = tokenizer.vocab_size
    tj = TokenJobs(tokenizer.token_bytes)
    tok_ids, seqs = tj.tok_ids, tj.seqs

    # pending sets -> small ints (0 = None: anything may follow)
    pend_ids: dict = {None: 0}
    pend_of_state = np.array([pend_ids.setdefault(p, len(pend_ids)) for p in lexer.pending], dtype=np.int64)
    pend_list = [None] * len(pend_ids)
    for p, i in pend_ids.items():
        pend_list[i] = p

    # realizable sequences per lexer state, lexer states grouped into classes with equal R_q
    classes: list[dict] = []
    class_key: dict[bytes, int] = {}
    qclass = np.zeros(lexer.n_states, dtype=np.int32)
    weights: list[np.ndarray] = []
    eos = tokenizer.eos_id
    for q in range(lexer.n_states):
        # EOS is one more job (eos_seq): the lexeme in progress must be a whole terminal (or ignored, or empty)
        job, eos_seq, key = tj.state_jobs(lexer, q, pend_of_state, len(pend_list))
        c = class_key.get(key)
        if c is None:
            c = class_key[key] = len(classes)
            cls = {"any": {}, "fin": {}, "live": set()}
            valid = job >= 0
            uniq, inv = np.unique(job[valid], return_inverse=True)
            order = np.argsort(inv, kind="stable")
            bounds = np.searchsorted(inv[order], np.arange(uniq.size + 1))
            vt = tok_ids[valid][order].astype(np.int32)   # token ids; int32 halves peak memory
            fin_parts: dict = {}
            any_parts: dict = {}
            for g, jk in enumerate(uniq.tolist()):
                seq, pid = divmod(jk, len(pend_list))
                toks = vt[bounds[g]: bounds[g + 1]]
                pend = pend_list[pid]
                if pend is None:
                    any_parts.setdefault(seq, []).append(toks)
                else:
                    for a in pend:
                        fin_parts.setdefault(seq, {}).setdefault(a, []).append(toks)
            if eos_seq >= 0:
                fin_parts.setdefault(eos_seq, {}).setdefault(end_t, []).append(np.array([eos], dtype=np.int32))
            for seq, parts in any_parts.items():
                cls["any"][seq] = len(weights)
                weights.append(np.concatenate(parts))
            for seq, by_a in fin_parts.items():
                d = cls["fin"][seq] = {}
                for a, parts in by_a.items():
                    d[a] = len(weights)
                    weights.append(np.concatenate(parts))
            live = cls["live"]
            for seq in list(cls["any"]) + list(cls["fin"]):
                while seq >= 0 and seq not in live:
                    live.add(seq)
                    seq = seqs.parent[seq]
            classes.append(cls)
        qclass[q] = c
        progress.tick("realizable terminal sequences",
                      lambda: f"lexer state {q + 1:,}/{lexer.n_states:,}, {len(seqs.parent):,} sequences")
    t_real = time.monotonic()

    clf = _Classifier(table, seqs, names, progress, max_states)
    end_state = table.end_states[grammar.start]
    states, first, first_out, trans, outputs = clf.build(classes, end_state)
    t_clf = time.monotonic()

    # the token set of every transition output, deduplicated (mask 0 = the empty set)
    n_words = n_mask_words(vocab)
    mask_index: dict[bytes, int] = {}
    masks: list[np.ndarray] = []
    out_mask = np.zeros(len(outputs), dtype=np.int32)
    for o, acc in enumerate(outputs):
        m = _mask_of(acc, weights, n_words)
        b = m.tobytes()
        k = mask_index.get(b)
        if k is None:
            k = mask_index[b] = len(masks)
            masks.append(m)
        out_mask[o] = k
    t_mask = time.monotonic()
    tr_list: list = [None] * len(states)
    for j, (out, default) in trans.items():
        tr_list[j] = ({X: (nj, int(out_mask[o])) for X, (nj, o) in out.items()},
                      (default[0], int(out_mask[default[1]])))
    min_rounds = 0
    if minimize:
        tr_list, first, min_rounds = minimize_classifier(tr_list, first)
    t_min = time.monotonic()
    return {
        "format": FORMAT,
        "table": table_to_plain(table),
        "start": grammar.start,
        "term_names": names,
        "step_state": lexer.step_state,
        "step_emit": lexer.step_emit,
        "winner": lexer.winner,
        "pending": lexer.pending,
        "leading_ignore": leading_ignore,
        "qclass": qclass,
        "first": first,
        "first_mask": out_mask[first_out],
        "trans": tr_list,
        "masks": np.stack(masks),
        "stats": {
            "lexer_states": lexer.n_states,
            "lexer_classes": len(classes),
            "parser_states": len(table.states),
            "shift_reduce_resolved_as_shift": n_shift,
            "terminal_sequences": len(seqs.parent),
            "automaton_states": len(states),
            "minimized_states": len(tr_list),
            "minimize_rounds": min_rounds,
            "transition_outputs": len(outputs),
            "distinct_masks": len(masks),
            "seconds": {
                "lalr+lexer": round(t_lex - t0, 3),
                "realizable": round(t_real - t_lex, 3),
                "classifier": round(t_clf - t_real, 3),
                "masks": round(t_mask - t_clf, 3),
                "minimize": round(t_min - t_mask, 3),
            },
        },
    }


def _mask_of(acc, weights, n_words):
    if not acc:
        return np.zeros(n_words, dtype=np.int32)
    return _pack(np.concatenate([weights[w] for w in acc]), n_words)


@dataclass
class PSCOptions:
    cache_dir: str | None = option(None, "compiled artifacts, keyed by grammar.key() + tokenizer.key(); null: "
                                   "$GCDBENCH_CACHE/psc (default ~/.cache/gcdbench)")
    lexer: str = option("standard", "PSC's own maximal-munch byte lexer over all terminals (Lark's contextual lexer: "
                        "not implemented)", choices=("standard",))
    leading_ignore: bool = option(False, "false: ignored text (whitespace) may not start the output, like the "
                                  "reference checker")
    lalr_timeout_s: float = option(60.0, "Lark's LALR analysis runs in a child process; not done in time -> "
                                   "CompileTimeout")
    max_build_s: float = option(600.0, "construction time budget; exceeded -> CompileTimeout (retried on resume)")
    max_lexer_states: int = option(5000, "size bound of the lexer automaton (one vocabulary pass per state); "
                                   "exceeded -> CompileError")
    max_states: int = option(2_000_000, "size budget of the stack classifier; exceeded -> CompileError")
    cache: bool = option(True, "read/write the on-disk cache of compiled artifacts", former="use_cache")
    conflicts: str = option("refuse", "shift/reduce conflicts of the grammar: refuse (CompileError naming them) | "
                            "shift (Lark's tables, each resolved as shift, as seed 003 ran SynCode's grammars: the "
                            "engine follows Lark's LALR parser, whose language can be smaller than the grammar's; "
                            "the audit shows where). Reduce/reduce conflicts are always refused",
                            choices=("refuse", "shift"))


class PSCEngine(Engine):
    name = "psc"
    plot_style = ("#1f4fd6", "s")   # strong blue, in every figure
    plot_emphasis = True   # built in this project: drawn thicker and on top
    artifact_keys = {"lexer states": ("lexer_states",), "LALR states": ("parser_states",),
                     "terminal sequences": ("terminal_sequences",), "classifier states": ("automaton_states",),
                     "minimised states": ("minimized_states",), "distinct masks": ("distinct_masks",)}

    def profile(self) -> Profile:
        """Lark's standard lexer (all terminals compete by longest match, string literals reserved);
        ``leading_ignore`` as its option."""
        return Profile(lexing="standard", leading_ignore=bool(self.opts["leading_ignore"]))

    @classmethod
    def complexity(cls, ambiguous: bool = False) -> str:
        """One walk of the stack classifier per mask: linear in the stack depth."""
        return "O(n)"

    Options = PSCOptions

    def version(self) -> str:
        try:
            from importlib.metadata import version

            return f"gcdbench-psc/{FORMAT} (gcdbench {version('gcdbench')})"
        except Exception:
            return f"gcdbench-psc/{FORMAT}"

    def compile(self, grammar: GrammarSpec, tokenizer) -> None:
        t0 = time.perf_counter()
        path = art = None
        if self.opts["cache"]:
            path = artifact_path("psc", self.opts["cache_dir"], grammar, tokenizer,
                                 "li1" if self.opts["leading_ignore"] else "li0",
                                 *(["sr"] if self.opts["conflicts"] == "shift" else []), fmt=FORMAT)
            art = load_artifact(path, FORMAT)
        cache_hit = art is not None
        if art is None:
            art = build_artifact(grammar, tokenizer, **self.opts)
            if path is not None:
                save_artifact(path, art)
        self._load(art, tokenizer)
        self._info = {"cache_hit": cache_hit, "init_s": round(time.perf_counter() - t0, 3), **art["stats"]}
        self.reset()

    def _load(self, art: dict, tokenizer) -> None:
        from lark.lexer import Token
        from lark.parsers.lalr_parser_state import ParseConf

        self._Token = Token
        self.art = art
        self.conf = ParseConf(table_from_plain(art["table"]), {}, art["start"])
        self.term_names = art["term_names"]
        self.step_state = art["step_state"].tolist()
        self.step_emit = art["step_emit"].tolist()
        self.winner = art["winner"].tolist()
        self.qclass = art["qclass"].tolist()
        self.first = art["first"].tolist()
        self.trans = art["trans"]
        self.first_mask = art["first_mask"].tolist()
        self.masks = art["masks"]
        self._unions: dict[tuple, np.ndarray] = {}
        self.token_bytes = tokenizer.token_bytes
        self.eos = tokenizer.eos_id
        self.vocab = tokenizer.vocab_size

    def reset(self) -> None:
        from lark.parsers.lalr_parser_state import ParserState

        self.q = 0
        self.ps = ParserState(self.conf, None)
        self.finished = False

    # -- runtime (Algorithm 4) ---------------------------------------------------------------------
    def mask_path(self) -> tuple:
        """Run the classifier over (lexer class, stack top ... bottom): the non-empty outputs on the path."""
        stack = self.ps.state_stack
        top = stack[-1]
        c = self.qclass[self.q]
        s = self.first[c][top]
        m = self.first_mask[c][top]
        path = (m,) if m else ()
        trans = self.trans
        i = len(stack) - 2
        while s and i >= 0:
            out, default = trans[s]
            s, m = out.get(stack[i], default)
            if m:
                path += (m,)
            i -= 1
        return path

    def fill_mask(self, out: np.ndarray) -> None:
        if self.finished:
            out[:] = 0
            return
        self._write(self.mask_path(), out)

    def _write(self, path: tuple, out: np.ndarray) -> None:
        """The mask of a classifier path: one precomputed mask, none, or their union (cached per path)."""
        if len(path) == 1:
            out[:] = self.masks[path[0]]
        elif not path:
            out[:] = 0
        else:
            m = self._unions.get(path)
            if m is None:
                masks = self.masks
                np.copyto(out, masks[path[0]])
                for k in path[1:]:
                    np.bitwise_or(out, masks[k], out=out)
                if len(self._unions) < 100_000:
                    self._unions[path] = out.copy()
            else:
                out[:] = m

    def fork(self) -> "PSCEngine":
        """A new sequence over the same compiled artifact, at the empty prefix."""
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)
        other.opts = dict(self.opts)
        other.reset()
        return other

    def fill_masks(self, seqs: Sequence["PSCEngine"], out: np.ndarray) -> None:
        """Every sequence's classifier path, then one gather for the rows whose mask is a single precomputed mask;
        rows with a union of several (cached per path, as in ``fill_mask``) and finished rows are written apart."""
        B = len(seqs)
        for s in seqs:
            if getattr(s, "masks", None) is not self.masks:
                raise ValueError("psc: fill_masks takes this engine and its forks only (one compiled grammar)")
        if out.ndim != 2 or out.shape[0] < B:
            raise ValueError(f"psc: out must be a [>= {B}, words] int32 array")
        one_row, one_mask = [], []
        for i, s in enumerate(seqs):
            if s.finished:
                out[i] = 0
                continue
            path = s.mask_path()
            if len(path) == 1:
                one_row.append(i)
                one_mask.append(path[0])
            elif not path:
                out[i] = 0
            else:
                s._write(path, out[i])   # a union: the cached one, or built and cached
        if one_row:
            out[np.asarray(one_row)] = self.masks[np.asarray(one_mask)]

    def _feed(self, t: int) -> bool:
        from lark.exceptions import UnexpectedToken

        try:
            self.ps.feed_token(self._Token(self.term_names[t], ""))
        except UnexpectedToken:
            return False
        return True

    def commit(self, token_id: int) -> bool:
        if self.finished:
            return False
        if token_id == self.eos:
            from lark.exceptions import UnexpectedToken

            w = final_terminal(self.winner, self.q)
            if w is not None and (w < 0 or not self._feed(w)):
                return False
            try:
                self.ps.feed_token(self._Token(END, ""), True)
            except UnexpectedToken:
                return False
            self.finished = True
            return True
        data = self.token_bytes[token_id] if 0 <= token_id < self.vocab else b""
        if not data:
            return False
        q = lex_bytes(self.step_state, self.step_emit, self.q, data, self._feed)
        if q < 0:
            return False
        self.q = q
        return True

    def info(self) -> dict:
        return dict(getattr(self, "_info", {}))
