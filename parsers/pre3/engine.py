"""Pre³ (seed 004) as the ``pre3`` engine: a DPDA with prefix-conditioned edges over LALR(1) tables.

See ``parsers/pre3/README.md``. Construction (timed as init, cached on disk): LALR(1) tables (``lalr.py``),
the front end (byte lexer or byte classes, ``front.py`` / ``charlevel.py``), the DPDA (``dpda.py``: one-step,
direct jumps by edge merging, aggregation, packed arrays). A mask runs every job (group of tokens) of the
current lexer class on its own overlay of the committed stack, in parallel (``kernels.py`` on the CPU,
``cuda_kernels.py`` on a GPU); ``commit`` updates the stack on the host.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from gcdbench.parsers.artifacts import artifact_path, load_artifact, save_artifact
from gcdbench.parsers.base import (CompileError, CompileTimeout, Engine, EngineError, GrammarSpec, Profile, allocate_mask,
                                   option)
from gcdbench.parsers.pre3.dpda import aggregate, direct_jumps, one_step, pack
from gcdbench.parsers.pre3.front import build_jobs, build_jobs_by_state, byte_class_transducer
from gcdbench.parsers.pre3.lalr import build_tables, conflict_message, lark_grammar
from gcdbench.parsers.lr.lexer import final_terminal, lex_bytes

FORMAT = 5   # bump when the cached artifact changes (5: lexer_exact, and auto takes an exact lexer first)
FRONT_ENDS = ("lexer", "chars", "auto")
MASK_MEMO_JOBS = 64   # the longest list of allowed jobs the CPU's memo of whole masks keeps


def summarize_char_conflicts(conflicts: list[str]) -> dict[str, int]:
    """Conflicts of the character-level expansion, counted by kind and by the terminals whose lexemes are
    involved (``NAME@3 -> ...`` is inside a NAME; ``IGN@k`` inside ignored text)."""
    import re

    out: dict[str, int] = {}
    for c in conflicts:
        kind = c.split(" ", 1)[0]
        names = sorted(set(re.findall(r"<([^ @<^]+)[@^]?\S* ->", c)))
        k = f"{kind}: {' vs '.join(names) or '?'}"
        out[k] = out.get(k, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def build_artifact(grammar: GrammarSpec, tokenizer, **options) -> dict:
    """Everything ``Pre3Engine`` needs, as plain data (pickled to the cache). ``options``: :class:`Pre3Options` by
    name, each one not given at its declared default (the one place defaults are written); the build reads
    ``front_end``, ``inline_max``, ``leading_ignore``, ``chunk``, ``max_build_s``, ``max_edges``, ``dense_min``,
    ``context_split``, ``conflicts`` (``"shift"`` keeps the shift of each shift/reduce conflict of the grammar;
    reduce/reduce ones are still refused) and ``sort_share_mb``."""
    from gcdbench.parsers.grammar import load_ir

    o = Pre3Engine.check_options(options)
    front_end, inline_max, leading_ignore = o["front_end"], int(o["inline_max"]), bool(o["leading_ignore"])
    chunk, max_build_s, max_edges = int(o["chunk"]), float(o["max_build_s"]), int(o["max_edges"])
    dense_min, context_split, conflicts = int(o["dense_min"]), bool(o["context_split"]), o["conflicts"]
    sort_share_mb = int(o["sort_share_mb"])

    load_ir(grammar)   # the harness's loader first: a grammar it cannot read is the same refusal for every engine
    t0 = time.monotonic()
    deadline = t0 + max_build_s
    cfg, terms, ignore = lark_grammar(grammar)
    tables = build_tables(cfg, "grammar")
    shift_resolved = 0
    if tables.conflicts:
        if conflicts != "shift" or any(c.startswith("reduce/reduce") for c in tables.conflicts):
            raise CompileError(conflict_message("grammar", tables.conflicts)
                               + ("" if conflicts == "shift" else "; conflicts=shift resolves shift/reduce ones as "
                                  "Lark's LALR parser does"))
        shift_resolved = len(tables.conflicts)   # build_tables keeps the shift of a shift/reduce conflict
    t_lalr = time.monotonic()
    # the lexer front end reads the scannerless language itself where the terminals allow it (exact.py); auto then
    # takes it (a mask there costs a few jobs of whole terminals, not a DPDA step per byte of every token)
    from gcdbench.parsers.pre3.exact import lexer_is_exact

    lexer_exact, exact_why = lexer_is_exact(cfg, terms, ignore) if front_end != "chars" else (False, "not checked")
    if front_end == "chars" and leading_ignore:
        raise CompileError("pre3: front_end=chars reads no leading ignored text; leading_ignore=true needs "
                           "front_end=lexer")
    char_level: dict = {}
    used = "lexer"
    if front_end == "chars" or front_end == "auto" and not leading_ignore and not lexer_exact:
        from gcdbench.parsers.pre3.charlevel import char_grammar

        ccfg, byte_class, n_dfa = char_grammar(cfg, terms, ignore)
        ctables = build_tables(ccfg, "character-level expansion")
        char_level = {"byte_classes": ccfg.n_t - 1, "automaton_states": n_dfa, "rules": len(ccfg.rules),
                      "lalr_states": ctables.n_states, "conflicts": len(ctables.conflicts)}
        if ctables.conflicts:
            char_level["by_cause"] = summarize_char_conflicts(ctables.conflicts)
            char_level["examples"] = ctables.conflicts[:5]
            if front_end == "chars":
                raise CompileError(conflict_message("character-level expansion", ctables.conflicts, 8)
                                   + "; use front_end=lexer (or auto)")
        else:
            used = "chars"
            tables = ctables
            lexer = byte_class_transducer(byte_class, ccfg.terminals[:-1])
    if used == "lexer":
        from gcdbench.parsers.lr.lexer import ByteLexer

        lexer = ByteLexer(terms, ignore, leading_ignore=leading_ignore)
    t_front = time.monotonic()
    d0 = one_step(tables)
    d0a = aggregate(d0)
    d1 = direct_jumps(tables, inline_max=inline_max, max_edges=max_edges)
    d2 = aggregate(d1)
    packed = pack(d2)
    t_dpda = time.monotonic()
    if time.monotonic() > deadline:
        raise CompileTimeout("pre3: construction exceeded its time budget (max_build_s)")
    term_id = {n: i for i, n in enumerate(tables.cfg.terminals)}
    max_push = max(1, d2.stats["max_push"])
    jobs = None
    split_note = "off"
    if used == "chars" and context_split:   # per top LR state: tokens decided without context (context.py)
        jobs = build_jobs_by_state(lexer, term_id, tokenizer, packed, 2 * packed.n_states + 8, max_push,
                                   chunk=chunk, dense_min=dense_min, sort_share_mb=sort_share_mb, deadline=deadline)
        if jobs is None:
            split_note = "skipped: over its size budget"
    if jobs is None:
        jobs = build_jobs(lexer, term_id, tokenizer, chunk=chunk, dense_min=dense_min, deadline=deadline)
        jobs["stats"]["context_split"] = split_note
    t_jobs = time.monotonic()
    lex_to_dpda = np.array([term_id.get(n, -1) for n in lexer.names], dtype=np.int32)
    return {
        "format": FORMAT,
        "front_end": used,
        "lexer_exact": used == "lexer" and lexer_exact,
        "leading_ignore": leading_ignore,
        "dpda": d2,
        "packed": packed,
        "jobs": jobs,
        "step_state": np.asarray(lexer.step_state, dtype=np.int32),
        "step_emit": np.asarray(lexer.step_emit, dtype=np.int32),
        "winner": np.asarray(lexer.winner, dtype=np.int32),
        "lex_to_dpda": lex_to_dpda,
        "end_sym": tables.cfg.n_t - 1,
        "start_state": tables.start_state,
        "max_push": max_push,
        "stats": {
            "front_end": used,
            "lexer_exact": {"exact": bool(lexer_exact), "why": exact_why},
            "lalr_states": tables.n_states,
            "shift_reduce_resolved_as_shift": shift_resolved,
            "terminals": tables.cfg.n_t - 1,
            "rules": len(tables.cfg.rules) - 1,
            "one_step": {"states": d0.stats["states"], "edges": d0.stats["edges"],
                         "edges_aggregated": len(d0a.edges)},
            "direct": {**d1.stats, "edges_aggregated": len(d2.edges), "inline_max": inline_max},
            **jobs["stats"],
            "char_level": char_level,
            "seconds": {"lalr": round(t_lalr - t0, 3), "front_end": round(t_front - t_lalr, 3),
                        "dpda": round(t_dpda - t_front, 3), "jobs": round(t_jobs - t_dpda, 3)},
        },
    }


class _Shared:
    """The compiled grammar every fork of an engine shares (read-only at run time)."""

    def __init__(self, art: dict, tokenizer, opts: dict):
        self.art = art
        p = art["packed"]
        j = art["jobs"]
        self.dpda_arrays = p.arrays()
        self.n_sym = int(p.n_sym)
        self.guard = int(2 * p.n_states + 8)
        self.end_sym = int(art["end_sym"])
        self.max_push = int(art["max_push"])
        self.maxloc = int((j["max_seq_len"] + 2) * (self.max_push + 1) + 4)
        self.jobs = j
        self.job_lcp = j["job_lcp"] if opts["share_prefixes"] else np.zeros_like(j["job_lcp"])
        # the kernels' tables in one pack (in kernels.TABLES order): one array argument instead of 22 per call; the
        # CUDA backend uploads the same pack
        from gcdbench.parsers.pre3.kernels import pack_tables

        self.tabs, self.hdr = pack_tables(tuple(self.dpda_arrays) + (
            j["seq_ptr"], j["seq_term"], j["pend_ptr"], j["pend_term"], j["cls_ptr"], j["job_seq"], j["job_pend"],
            j["jt_ptr"], j["jt_tok"], j["dense_id"], self.job_lcp))
        self.dense_mask = j["dense_mask"]
        self.n_ch, self.ch_words = int(j["n_ch"]), int(j["chunk"]) // 32
        self.max_len = int(j["max_seq_len"])
        # the memo's key packs (committed height, state, terminal) into 64 bits: 2^20 states, 2^12 terminals
        fits = int(p.n_states) < 2**20 and self.n_sym < 2**12
        self.memo_cap = 1 << max(0, int(opts["run_memo"]) - 1).bit_length() if fits and opts["run_memo"] > 0 else 0
        # whole masks memoised across calls by their allowed jobs (kernels.masks_batch; CPU): entries x (count, jobs)
        n_memo = 1 << max(0, int(opts["mask_memo"]) - 1).bit_length() if opts["mask_memo"] > 0 else 0
        self.mkeys = np.full((n_memo, MASK_MEMO_JOBS + 1), -1, dtype=np.int64)
        self.mrows = np.zeros((n_memo, (tokenizer.vocab_size + 31) // 32), dtype=np.uint32)
        self.qclass = j["qclass"]
        self.state_class = j.get("state_class")   # character level, split by context: class of the top LR state
        self.step_state = art["step_state"].tolist()
        self.step_emit = art["step_emit"].tolist()
        self.winner = art["winner"].tolist()
        self.lex_to_dpda = art["lex_to_dpda"].tolist()
        self.start_state = int(art["start_state"])
        self.token_bytes = tokenizer.token_bytes
        self.eos = tokenizer.eos_id
        self.vocab = tokenizer.vocab_size
        self.backend = opts["backend"]
        self.threads = int(opts["threads"])
        self.cuda = None
        if self.backend == "cuda":
            from gcdbench.parsers.pre3.cuda_kernels import CudaMasks

            self.cuda = CudaMasks(self, threads=int(opts["cuda_threads"]), block=int(opts["cuda_block"]))
        else:
            import numba

            from gcdbench.parsers.pre3.kernels import masks_cpu, masks_cpu_one

            self.set_threads = numba.set_num_threads
            self.threads = numba.config.NUMBA_NUM_THREADS if self.threads <= 0 else self.threads
            self.kernel = masks_cpu if self.threads > 1 else masks_cpu_one

    def kernel_args(self, base: np.ndarray, lens: np.ndarray, cls: np.ndarray, out_u32: np.ndarray) -> tuple:
        """The CPU mask kernel's arguments for these sequences (stacks, lengths, lexer classes) and mask rows."""
        return (self.tabs, self.hdr, self.dense_mask, self.n_sym, self.guard, self.end_sym, self.n_ch, self.ch_words,
                self.max_len, self.memo_cap, self.maxloc, self.threads, self.mkeys, self.mrows, base, lens, cls,
                out_u32)

    def compile_kernels(self, stack: np.ndarray, lens: np.ndarray, cls: np.ndarray, vocab_size: int) -> None:
        """Load or compile the CPU kernels a mask and a commit call, for the types of their real calls, without
        running them (:func:`~gcdbench.parsers.targets.compile_for`); the CUDA kernels compile at their first
        launch."""
        from gcdbench.parsers.pre3.kernels import commit_terms
        from gcdbench.parsers.targets import compile_for

        compile_for(commit_terms, self.tabs, self.hdr, self.n_sym, self.guard, stack, 1, np.zeros(1, np.int32),
                    np.zeros(1, np.int32))
        if self.cuda is None:
            out = allocate_mask(vocab_size).reshape(1, -1).view(np.uint32)
            compile_for(self.kernel, *self.kernel_args(stack, lens, cls, out))

    def masks(self, base: np.ndarray, lens: np.ndarray, cls: np.ndarray, out_u32: np.ndarray) -> None:
        if self.cuda is not None:
            broken = self.cuda.masks(base, lens, cls, out_u32)
        else:
            if self.threads > 1:   # per calling thread (another engine here may have changed it); ~1 µs a call
                self.set_threads(self.threads)
            broken = self.kernel(*self.kernel_args(base, lens, cls, out_u32))
        if broken:
            raise EngineError(f"pre3: {broken} DPDA run(s) did not terminate (a construction bug)")


@dataclass
class Pre3Options:
    backend: str = option("cpu", "cpu (numba, jobs in parallel) | cuda (numba.cuda; NUMBA_ENABLE_CUDASIM=1 simulates)",
                          choices=("cpu", "cuda"))
    threads: int = option(1, "cpu: numba threads (0 = all NUMBA_NUM_THREADS) sharing the jobs and mask chunks")
    front_end: str = option("auto", "lexer (PSC's byte lexer = Lark's standard lexer) | chars (bytes) | auto (the "
                            "lexer where it reads the scannerless language exactly, else chars if LALR(1), else the "
                            "lexer)", choices=("auto", "lexer", "chars"))
    inline_max: int = option(4, "direct jumps: inline a branch point of at most this many edges, else a reduce state")
    leading_ignore: bool = option(False, "false: no ignored text before the first terminal, like the reference "
                                  "(lexer only)")
    chunk: int = option(8192, "vocabulary ids per mask chunk (a multiple of 32): the parallel unit of the mask fill")
    dense_min: int = option(512, "a job with more tokens than this gets a precomputed mask row instead of a token list")
    cuda_threads: int = option(16384, "cuda: threads per launch (grid-stride over jobs), each with its own overlay "
                               "stack (not the cpu thread count: a launch size)")
    cuda_block: int = option(128, "cuda: threads per block")
    cache_dir: str | None = option(None, "compiled artifacts (grammar, tokenizer, options); "
                                   "null: $GCDBENCH_CACHE/pre3 (default ~/.cache/gcdbench)")
    cache: bool = option(True, "read/write the on-disk cache of compiled artifacts", former="use_cache")
    max_build_s: float = option(600.0, "construction time budget (checked between steps); exceeded -> CompileTimeout "
                                "(as PSC's: a resume compiles again)")
    max_edges: int = option(2_000_000, "size budget of the direct-jump DPDA; exceeded -> CompileError")
    context_split: bool = option(True, "character level: per LR state, decide at build time the tokens whose run "
                                 "never reads below that state (one mask row), run only the others per mask")
    sort_share_mb: int = option(64, "character level, context split: MB of subtree sorts shared between LR states "
                                "at build time (context.sort_states; 0 = every state walks the whole token trie, "
                                "the ablation; the same artifact)")
    share_prefixes: bool = option(True, "cpu: a mask runs the terminal prefix jobs share once (a class's jobs in "
                                  "lexicographic order) and skips the jobs behind a failed prefix; false runs every "
                                  "job from the stack (the ablation; the same masks)")
    run_memo: int = option(256, "cpu: entries (a power of two) of the per-mask memo of runs on the committed stack "
                           "(kernels.feed_memo; 0 = off, the ablation; the same masks)")
    mask_memo: int = option(64, "cpu: entries (a power of two) of the memo of whole masks across calls, keyed by the "
                            "jobs a mask allows (a mask equal to a kept one is one row copy; 0 = off, the ablation; "
                            "the same masks)")
    conflicts: str = option("refuse", "shift/reduce conflicts of the grammar: refuse (CompileError naming them) | "
                            "shift (keep the shift, as Lark's LALR parser and yacc do, and seed 003 with SynCode's "
                            "grammars: the engine follows that parser, whose language can be smaller than the "
                            "grammar's; the audit shows where). Reduce/reduce conflicts are always refused",
                            choices=("refuse", "shift"))


class Pre3Engine(Engine):
    name = "pre3"
    plot_style = ("#119c3a", "D")   # green, in every figure
    plot_emphasis = True   # built in this project: drawn thicker and on top
    threads_option = "threads"
    # the simulator runs every GPU thread as a Python thread: a few dozen there
    cuda_agenda = {"cuda": {"backend": "cuda"}, "cpu": {"backend": "cpu"},
                   "sweep": ("cuda_threads", (1024, 4096, 16384, 65536)),
                   "dry_run": {"cuda": {"cuda_threads": 64, "cuda_block": 32}, "sweep": (32,)}}
    artifact_keys = {
        "front end": ("front_end",),
        "LALR states": ("lalr_states",),
        "terminals": ("terminals",),
        "one-step DPDA states": ("one_step", "states"),
        "one-step edges": ("one_step", "edges"),
        "one-step edges aggregated": ("one_step", "edges_aggregated"),
        "DPDA states (direct jumps)": ("direct", "states"),
        "edges (direct jumps)": ("direct", "edges"),
        "edges aggregated": ("direct", "edges_aggregated"),
        "lexer classes": ("lexer_classes",),
        "jobs": ("jobs",),
        "char-level conflicts": ("char_level", "conflicts"),
    }

    Options = Pre3Options

    def version(self) -> str:
        try:
            from importlib.metadata import version

            return f"gcdbench-pre3/{FORMAT} (gcdbench {version('gcdbench')})"
        except Exception:
            return f"gcdbench-pre3/{FORMAT}"

    @classmethod
    def complexity(cls, ambiguous: bool = False) -> str:
        # one DPDA run per job; a run of one terminal takes one edge, plus one per loop turn (bounded by the
        # stack it pops): linear in the prefix at worst
        return "O(n)"

    #: the kernels of backend=cuda with the argument types of their real launches (dry runs, no GPU)
    cuda_signatures = "gcdbench.parsers.pre3.cuda_signatures:launch_signatures"

    def profile(self) -> Profile:
        """The character level reads the scannerless language (``Profile()``); the lexer front end Lark's standard
        lexing, which is that same language where the terminals allow it (``exact.py``: then ``Profile()`` too).
        Before compile: what the options alone decide (``auto`` and ``lexer`` depend on the grammar)."""
        used = getattr(self, "_shared", None)
        front = used.art["front_end"] if used is not None else self.opts["front_end"]
        exact = bool(used.art.get("lexer_exact")) if used is not None else False
        if front == "chars":
            return Profile()
        return Profile(lexing="scannerless" if exact else "standard",
                       leading_ignore=bool(self.opts["leading_ignore"]))

    def _check_options(self):
        """Ranges the declared options cannot state (choices are checked on construction, Pre3Options)."""
        o = self.opts
        import numba

        if not 0 <= int(o["threads"]) <= numba.config.NUMBA_NUM_THREADS:
            raise ValueError(f"engine pre3: threads must be 0 (all) or 1..{numba.config.NUMBA_NUM_THREADS} "
                             f"(NUMBA_NUM_THREADS), not {o['threads']}")
        if int(o["chunk"]) <= 0 or int(o["chunk"]) % 32:
            raise ValueError(f"engine pre3: chunk must be a positive multiple of 32, not {o['chunk']}")
        if int(o["sort_share_mb"]) < 0:
            raise ValueError(f"engine pre3: sort_share_mb must be 0 (off) or a number of MB, not {o['sort_share_mb']}")
        if int(o["mask_memo"]) < 0:
            raise ValueError(f"engine pre3: mask_memo must be 0 (off) or a number of entries, not {o['mask_memo']}")
        if int(o["run_memo"]) < 0:
            raise ValueError(f"engine pre3: run_memo must be 0 (off) or a number of entries, not {o['run_memo']}")

    def compile(self, grammar: GrammarSpec, tokenizer) -> None:
        self._check_options()
        t0 = time.perf_counter()
        o = self.opts
        path = art = None
        if o["cache"]:
            path = artifact_path("pre3", o["cache_dir"], grammar, tokenizer, o["front_end"],
                                 f"li{int(bool(o['leading_ignore']))}", f"k{int(o['inline_max'])}",
                                 f"c{int(o['chunk'])}", f"d{int(o['dense_min'])}",
                                 f"x{int(bool(o['context_split']))}",
                                 *(["sr"] if o["conflicts"] == "shift" else []), fmt=FORMAT)
            art = load_artifact(path, FORMAT)
        cache_hit = art is not None
        if art is None:
            art = build_artifact(grammar, tokenizer, **o)
            if path is not None:
                save_artifact(path, art)
        self._shared = _Shared(art, tokenizer, o)
        self.reset()
        # numba's loads and compiles here, in init (no mask is computed): none inside a timed mask
        self._shared.compile_kernels(self._stack, *self._one, tokenizer.vocab_size)
        self._info = {"cache_hit": cache_hit, "init_s": round(time.perf_counter() - t0, 3), "backend": o["backend"],
                      **art["stats"]}

    @property
    def dpda(self):
        """The readable DPDA (after direct jumps and aggregation)."""
        return self._shared.art["dpda"]

    @property
    def packed(self):
        return self._shared.art["packed"]

    # -- per-sequence state ------------------------------------------------------------------------
    def reset(self) -> None:
        self._stack = np.zeros((1, 64), dtype=np.int32)
        self._stack[0, 0] = self._shared.start_state
        self._L = 1
        self._q = 0
        self._finished = False
        self._one = (np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int32))   # fill_mask's length and class

    def fork(self) -> "Pre3Engine":
        other = type(self)(**self.opts)
        other._shared = self._shared
        other._info = dict(getattr(self, "_info", {}))
        other.reset()
        return other

    @property
    def stack(self) -> list[int]:
        """The committed LR stack (bottom first)."""
        return self._stack[0, : self._L].tolist()

    def _cls(self) -> int:
        if self._finished:
            return -1
        sc = self._shared.state_class
        if sc is not None:
            return int(sc[self._stack[0, self._L - 1]])
        return int(self._shared.qclass[self._q])

    def fill_mask(self, out: np.ndarray) -> None:
        if not out.flags.c_contiguous:
            raise ValueError("pre3: the mask buffer must be a C-contiguous int32 array")
        lens, cls = self._one
        lens[0] = self._L
        cls[0] = self._cls()
        self._shared.masks(self._stack, lens, cls, out.reshape(1, -1).view(np.uint32))

    def fill_masks(self, seqs: Sequence["Pre3Engine"], out: np.ndarray) -> None:
        sh = self._shared
        for s in seqs:
            if getattr(s, "_shared", None) is not sh:
                raise ValueError("pre3: fill_masks takes this engine and its forks only (one compiled grammar)")
        B = len(seqs)
        if out.shape[0] < B or not out.flags.c_contiguous:
            raise ValueError(f"pre3: out must be a C-contiguous [>= {B}, words] int32 array")
        maxL = max(s._L for s in seqs) if seqs else 1
        base = np.zeros((B, maxL), dtype=np.int32)
        lens = np.empty(B, dtype=np.int64)
        cls = np.empty(B, dtype=np.int32)
        for i, s in enumerate(seqs):
            base[i, : s._L] = s._stack[0, : s._L]
            lens[i] = s._L
            cls[i] = s._cls()
        sh.masks(base, lens, cls, out[:B].view(np.uint32))

    def _run_terms(self, terms: list[int]) -> int:
        from gcdbench.parsers.pre3.kernels import commit_terms

        sh = self._shared
        need = self._L + (len(terms) + 1) * (sh.max_push + 1) + 2
        if need > self._stack.shape[1]:
            grown = np.zeros((1, max(need, 2 * self._stack.shape[1])), dtype=np.int32)
            grown[0, : self._L] = self._stack[0, : self._L]
            self._stack = grown
        loc = np.empty((len(terms) + 1) * (sh.max_push + 1) + 2, dtype=np.int32)
        r, L = commit_terms(sh.tabs, sh.hdr, sh.n_sym, sh.guard, self._stack, self._L,
                            np.asarray(terms, dtype=np.int32), loc)
        if r == -2:
            raise EngineError("pre3: a DPDA run did not terminate (a construction bug)")
        if r == 0:
            self._L = L
        return r

    def commit(self, token_id: int) -> bool:
        sh = self._shared
        if self._finished:
            return False
        if token_id == sh.eos:
            w = final_terminal(sh.winner, self._q)
            terms = []
            if w is not None:
                if w < 0 or sh.lex_to_dpda[w] < 0:
                    return False
                terms.append(sh.lex_to_dpda[w])
            if terms and self._run_terms(terms) != 0:
                return False
            if self._run_terms([sh.end_sym]) != 1:
                return False
            self._finished = True
            return True
        data = sh.token_bytes[token_id] if 0 <= token_id < sh.vocab else b""
        if not data:
            return False
        terms = []
        to_dpda = sh.lex_to_dpda

        def emit(e: int) -> bool:
            t = to_dpda[e]
            terms.append(t)
            return t >= 0

        q = lex_bytes(sh.step_state, sh.step_emit, self._q, data, emit)
        if q < 0:
            return False
        if terms and self._run_terms(terms) != 0:
            return False
        self._q = q
        return True

    def info(self) -> dict:
        return dict(getattr(self, "_info", {}))

    def close(self) -> None:
        sh = getattr(self, "_shared", None)
        if sh is not None and sh.cuda is not None:
            sh.cuda.close()
