"""CFGzip (PyPI ``cfgzip``) + XGrammar behind the engine interface, fully offline.

Init = (1) the project's Lark -> XGrammar EBNF converter, (2) cfgzip's Rust preprocessor
``cfgzip-preprocess`` run as a child process over a Hugging Face tokenizer that we build offline and store
in a local hub cache (``HF_HUB_OFFLINE=1``), which groups the vocabulary into token classes, (3) cfgzip's
``XgrammarProcessor.load_and_compile``: an XGrammar matcher over one representative token per class.
The preprocessing output is cached on disk, keyed by grammar, tokenizer, EBNF text and options; its time
and the child's peak memory are recorded in ``info()`` (and kept in the cache's ``meta.json`` so a cache
hit still reports what the preprocessing cost).

Per step: XGrammar fills a class-level bitmask, which we expand to the full vocabulary with a gather over
``token_classes`` (tokens cfgzip found invalid everywhere, special and padding ids stay masked).

cfgzip's GBNF reader is narrower than XGrammar's EBNF: it silently drops ``{m,n}`` repetition, so the
adapter writes each bounded repetition out as a plain sequence first (the same language; JSON strings'
``\\u[0-9a-fA-F]{4}`` and every length bound of a JSON Schema need it), and it assumes the start rule is not
recursive, which raises :class:`CompileError` here instead of giving wrong classes.
cfgzip 0.2.0 also drops the empty match of any run of terminal items that can match ``""`` (e.g.
``ws ::= [ ]*``, which our converter inlines after every terminal) when it computes token classes, so a
token that needs that empty match (``"(*)"``, ``",x"``, ``"selectors"`` on tiny SQL with Qwen3) is classed
invalid everywhere and masked (minimal repro in ``tests/test_cfgzip.py``). By default the engine is kept
as published and the audit reports the false blocks; ``fix_nullable_terminals: true`` applies our
workaround (such runs become ``"" | (run)``), after which cfgzip agrees with the reference, at the price
of many more classes (Spider: about 9x) and a much costlier preprocessing.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from typing import Sequence

import numpy as np

from gcdbench.parsers.base import CompileError, CompileTimeout, Engine, GrammarSpec, Profile, option
from gcdbench.parsers.convert_dialects import written_out
from gcdbench.parsers.common.limited import LimitedProcess


class PreprocessTimeout(CompileTimeout):
    """``cfgzip-preprocess`` ran past ``preprocess_timeout_s`` (a time budget: retried on resume)."""


def _default_cache_dir() -> Path:
    from gcdbench.parsers.base import cache_dir_of

    return cache_dir_of("cfgzip")


def _preprocess_command() -> Path:
    """The ``cfgzip-preprocess`` executable installed with the imported cfgzip (from its wheel's file list, so
    it is found wherever that package lives), else the one on ``PATH``."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution("cfgzip")
        for f in dist.files or []:
            if f.name == "cfgzip-preprocess" and Path(dist.locate_file(f)).is_file():
                return Path(dist.locate_file(f)).resolve()
    except PackageNotFoundError:
        pass
    found = shutil.which("cfgzip-preprocess")
    if found is None:
        raise CompileError("cfgzip: the cfgzip-preprocess command is not installed (pip install cfgzip==0.2.0)")
    return Path(found)


def _strip_literals(line: str) -> str:
    """``line`` with string literals and character classes blanked out (to look for operators)."""
    out, i, n = [], 0, len(line)
    while i < n:
        c = line[i]
        if c in '"[':
            close = '"' if c == '"' else "]"
            j = i + 1
            while j < n and line[j] != close:
                j += 2 if line[j] == "\\" else 1
            out.append(" ")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def escape_parens_in_literals(ebnf: str) -> str:
    """``(`` and ``)`` inside string literals and character classes written as ``\\x28``/``\\x29``.

    cfgzip's GBNF reader counts parentheses inside nested groups without skipping literals, so
    ``t ::= (")") ws`` fails to parse ("unrecognized gbnf atom"); the hex escapes mean the same to both
    cfgzip and XGrammar.
    """
    out, i, n = [], 0, len(ebnf)
    close = None
    while i < n:
        c = ebnf[i]
        if close is None:
            if c in '"[':
                close = '"' if c == '"' else "]"
            out.append(c)
        elif c == "\\" and i + 1 < n:
            out.append(ebnf[i:i + 2])
            i += 2
            continue
        elif c == close:
            close = None
            out.append(c)
        elif c in "()":
            out.append("\\x28" if c == "(" else "\\x29")
        else:
            out.append(c)
        i += 1
    return "".join(out)


_BRACES = re.compile(r"\{\s*(\d*)\s*(,\s*(\d*)\s*)?\}")
MAX_COPIES = 256   # the JSON Schema converter's own max_repeat: a larger bound never comes from it


def expand_bounded_repetition(ebnf: str, max_copies: int = MAX_COPIES) -> tuple[str, int]:
    """``X{m}``, ``X{m,}`` and ``X{m,n}`` written out as plain sequences; returns the text and how many it
    rewrote.

    cfgzip's GBNF reader drops ``{m,n}`` without a word, so each repetition is spelled out as KBNF's is
    (:func:`~gcdbench.parsers.convert_dialects.written_out`). The language is the same for cfgzip and
    XGrammar; a bound above ``max_copies`` raises :class:`CompileError`."""
    count = 0

    def item_end(rhs: str, i: int) -> int:
        c = rhs[i]
        if c in '"[':
            close, j = ('"' if c == '"' else "]"), i + 1
            while j < len(rhs) and rhs[j] != close:
                j += 2 if rhs[j] == "\\" else 1
            return j + 1
        if c == "(":
            depth, j = 1, i + 1
            while j < len(rhs) and depth:
                if rhs[j] in '"[':
                    j = item_end(rhs, j)
                    continue
                depth += {"(": 1, ")": -1}.get(rhs[j], 0)
                j += 1
            return j
        j = i + 1
        while j < len(rhs) and (rhs[j].isalnum() or rhs[j] in "_-"):
            j += 1
        return j

    def expand(rhs: str, rule: str) -> str:
        nonlocal count
        items: list[str] = []
        i = 0
        while i < len(rhs):
            c = rhs[i]
            if c.isspace():
                i += 1
            elif c == "#":
                break
            elif c in "?*+" and items and items[-1] != "|":
                items[-1] += c
                i += 1
            elif c == "{":
                m = _BRACES.match(rhs, i)
                if m is None or not items or items[-1] == "|":
                    raise CompileError(f"cfgzip: cannot read the repetition at {rhs[i:i + 20]!r} in rule {rule!r}")
                lo = int(m.group(1) or 0)
                hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
                if max(lo, hi or 0) > max_copies:
                    raise CompileError(f"cfgzip: the repetition {m.group(0)} in rule {rule!r} is above "
                                       f"{max_copies} copies (cfgzip's GBNF reader has no {{m,n}}; the harness "
                                       "writes repetitions out up to that bound)")
                x = items.pop()
                seq = written_out(x if x[-1] not in "?*+" else f"({x})", lo, hi)
                items.append("(" + " ".join(seq) + ")" if seq else '""')
                count += 1
                i = m.end()
            elif c in '"[(' or c.isalpha() or c == "_":
                j = item_end(rhs, i)
                items.append("(" + expand(rhs[i + 1:j - 1], rule) + ")" if c == "(" else rhs[i:j])
                i = j
            else:   # "|", and anything else as it stands (XGrammar's reader judges it)
                items.append(c)
                i += 1
        return " ".join(items)

    lines = []
    for line in ebnf.splitlines():
        if " ::= " in line and _BRACES.search(_strip_literals(line)):
            lhs, rhs = line.split(" ::= ", 1)
            lines.append(f"{lhs} ::= {expand(rhs, lhs.strip())}")
        else:
            lines.append(line)
    return "\n".join(lines) + ("\n" if ebnf.endswith("\n") else ""), count


def fix_nullable_terminal_runs(ebnf: str) -> tuple[str, int]:
    """Work around cfgzip 0.2.0's empty-match bug; returns the rewritten text and how many runs it moved.

    cfgzip merges each maximal run of terminal items (strings, classes, groups of them) into one regex and
    builds its byte NFA without the empty match, so a run that can match ``""`` (``ws ::= [ ]*``) loses
    it when token classes are computed. Each such run becomes a rule ``nullfix_<k> ::= "" | (run)``: an
    explicit empty alternative, which cfgzip handles. The language is unchanged (XGrammar reads the same
    text).
    """
    from cfgzip.preprocessing.parse_gbnf import _is_terminal_tok, _tokenize, gbnf_to_regex

    extra: list[str] = []

    def nullable(text: str) -> bool:
        try:
            return re.fullmatch(gbnf_to_regex(text), "") is not None
        except Exception:  # noqa: BLE001 - cfgzip's own reader failed; leave the run as it is
            return False

    def fix_rhs(rhs: str) -> str:
        alts: list[list[str]] = [[]]
        run: list[tuple] = []

        def flush():
            if run:
                text = " ".join(t[1] + t[2] for t in run)
                if nullable(text):
                    name = f"nullfix_{len(extra)}"
                    extra.append(f'{name} ::= "" | ({text})')
                    text = name
                alts[-1].append(text)
                run.clear()

        for tok in _tokenize(rhs):
            if tok[0] == "alt":
                flush()
                alts.append([])
            elif _is_terminal_tok(tok):
                run.append(tok)
            else:
                flush()
                if tok[0] == "group":
                    alts[-1].append("(" + fix_rhs(tok[1][1:-1]) + ")" + tok[2])
                else:
                    alts[-1].append(tok[1] + tok[2])
        flush()
        return " | ".join(" ".join(a) if a else '""' for a in alts)

    lines = []
    for line in ebnf.splitlines():
        if " ::= " in line:
            lhs, rhs = line.split(" ::= ", 1)
            lines.append(f"{lhs} ::= {fix_rhs(rhs)}")
        else:
            lines.append(line)
    return "\n".join(lines + extra) + "\n", len(extra)


def check_gbnf_limits(ebnf: str, root: str = "root") -> None:
    """Raise CompileError for what cfgzip's GBNF reader would silently get wrong."""
    rhs_names: set[str] = set()
    for raw in ebnf.splitlines():
        line = _strip_literals(raw).split("#", 1)[0]
        if "::=" not in line:
            continue
        lhs, rhs = line.split("::=", 1)
        if re.search(r"\{\s*\d*\s*(,\s*\d*\s*)?\}", rhs):
            raise CompileError(
                f"cfgzip: {{m,n}} repetition is not supported by cfgzip's GBNF reader (it drops it silently), "
                f"in rule {lhs.strip()!r}"
            )
        rhs_names.update(re.findall(r"[A-Za-z_][A-Za-z0-9_-]*", rhs))
    if root in rhs_names:
        raise CompileError(f"cfgzip: the start rule {root!r} is used recursively (cfgzip assumes it never is)")


@dataclass
class CFGzipOptions:
    cache_dir: str | None = option(None, "token classes; null: $GCDBENCH_CACHE/cfgzip (default ~/.cache/gcdbench)")
    cache: bool = option(False, "reuse token classes from an earlier run (init then excludes preprocessing; info() "
                         "says cache_hit)", former="use_cache")
    num_threads: int = option(1, "cfgzip-preprocess --num-threads")
    max_threads: int = option(1, "XGrammar's threads: its compiler and its batch matcher (batch.threads sets it)")
    skip_null_bytes: bool = option(False, "cfgzip-preprocess --skip-null-bytes")
    skip_repeat_bytes: bool = option(False, "cfgzip-preprocess --skip-repeat-bytes")
    skip_repeat_min_run: int = option(4, "cfgzip-preprocess --skip-repeat-min-run")
    preprocess_timeout_s: float | None = option(None, "time budget of cfgzip-preprocess; null: no limit of our own")
    fix_nullable_terminals: bool = option(False, "our workaround for cfgzip 0.2.0 masking valid tokens around empty "
                                          "matches (false: as published)")


class CFGzipEngine(Engine):
    name = "cfgzip"
    plot_style = ("#7b4a12", "<")   # brown, in every figure
    Options = CFGzipOptions
    threads_option = "max_threads"   # XGrammar's: its compiler and its batch matcher
    accelerates = "xgrammar"         # XGrammar's matcher over token classes: the same masks
    artifact_keys = {"offline preprocessing (s)": ("preprocess_s_recorded",), "token classes": ("n_classes",)}

    def __init__(self, **options):
        super().__init__(**options)
        # imported here, not in compile: importing cfgzip pulls in transformers (seconds), not init work
        import cfgzip  # noqa: F401
        import xgrammar  # noqa: F401

    def version(self) -> str:
        import importlib.metadata

        return f"cfgzip {importlib.metadata.version('cfgzip')} + xgrammar {importlib.metadata.version('xgrammar')}"

    def profile(self) -> Profile:
        """The harness's language: the grammar goes in through our scannerless EBNF converter. (cfgzip 0.2.0's
        empty-match bug is a bug, not a language: the audit reports its false blocks.)"""
        return Profile()

    @classmethod
    def complexity(cls, ambiguous: bool = False) -> str:
        return "?"

    # -- init -----------------------------------------------------------------------------------
    def compile(self, grammar: GrammarSpec, tokenizer) -> None:
        from gcdbench.parsers.convert import lark_to_xgrammar_ebnf

        self.compile_ebnf(lark_to_xgrammar_ebnf(grammar), tokenizer, grammar_key=grammar.key())

    def compile_ebnf(self, ebnf: str, tokenizer, grammar_key: str | None = None) -> None:
        """Init from XGrammar/GBNF text directly (start rule ``root``); ``compile`` converts and calls this."""
        from gcdbench.parsers.hf_tokenizer import save_to_hf_cache

        ebnf, n_repeats = expand_bounded_repetition(ebnf)
        check_gbnf_limits(ebnf)
        ebnf = escape_parens_in_literals(ebnf)
        self._info: dict = {"grammar_form": "ebnf", "bounded_repetitions_written_out": n_repeats}
        if self.opts["fix_nullable_terminals"]:
            ebnf, n = fix_nullable_terminal_runs(ebnf)
            self._info["nullable_terminal_runs_fixed"] = n
        self.ebnf = ebnf
        cache_root = Path(self.opts["cache_dir"]).expanduser() if self.opts["cache_dir"] else _default_cache_dir()

        t0 = time.perf_counter()
        try:
            model_id, hf_cache = save_to_hf_cache(tokenizer, cache_root / "hf")
        except ValueError as err:  # a vocabulary an HF tokenizer cannot reproduce id for id
            raise CompileError(f"cfgzip needs a Hugging Face tokenizer: {err}") from err
        self._info["hf_tokenizer_s"] = time.perf_counter() - t0

        flags = self._preprocess_flags(tokenizer)
        h = hashlib.sha256("\n".join([ebnf, *flags, self.version()]).encode()).hexdigest()[:12]
        key = f"{grammar_key or 'ebnf'}-{tokenizer.key()}-{h}"
        out_dir = cache_root / "classes" / key
        self._info["cache_path"] = str(out_dir)
        if self.opts["cache"] and (out_dir / "meta.json").exists():
            meta = json.loads((out_dir / "meta.json").read_text())
            self._info.update(cache_hit=True, preprocess_s=0.0, preprocess_peak_rss_mb=0.0)
        else:
            meta = self._preprocess(ebnf, model_id, hf_cache, flags, out_dir)
            self._info.update(cache_hit=False, preprocess_s=meta["preprocess_s"],
                              preprocess_peak_rss_mb=meta["preprocess_peak_rss_mb"])
        self._info["preprocess_s_recorded"] = meta["preprocess_s"]
        self._info["preprocess_peak_rss_mb_recorded"] = meta["preprocess_peak_rss_mb"]
        self._info["preprocess_timings"] = meta.get("timings", {})

        t0 = time.perf_counter()
        self._load(out_dir, ebnf, tokenizer)
        self._info["xgrammar_compile_s"] = time.perf_counter() - t0
        import resource

        self._info["process_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0

    def _preprocess_flags(self, tokenizer) -> list[str]:
        flags = ["--n-logits", str(tokenizer.vocab_size), "--num-threads", str(int(self.opts["num_threads"]))]
        if self.opts["skip_null_bytes"]:
            flags.append("--skip-null-bytes")
        if self.opts["skip_repeat_bytes"]:
            flags += ["--skip-repeat-bytes", "--skip-repeat-min-run", str(int(self.opts["skip_repeat_min_run"]))]
        return flags

    def _preprocess(self, ebnf: str, model_id: str, hf_cache: Path, flags: list[str], out_dir: Path) -> dict:
        exe = _preprocess_command()
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=out_dir.name + ".", dir=out_dir.parent))
        try:
            (work / "grammar.gbnf").write_text(ebnf)
            cmd = [str(exe), "--model-id", model_id, "--cache-dir", str(hf_cache), "--grammar-file",
                   str(work / "grammar.gbnf"), "--output", str(work / "out"), "--start-symbol", "root",
                   "--no-progress", "--timings", *flags]
            env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(hf_cache.parent)}
            limit = self.opts["preprocess_timeout_s"]
            with open(work / "stderr", "wb") as err, open(work / "stdout", "wb") as out:
                t0 = time.perf_counter()
                proc = LimitedProcess(cmd, stdout=out, stderr=err, env=env)
                try:
                    ev = proc.wait(None if limit is None else float(limit))
                finally:
                    proc.close()   # kills it if it is still running (time-out, or an exception here)
                elapsed = time.perf_counter() - t0
            status = ev.value if ev.kind == "exit" else None
            stderr = (work / "stderr").read_text(errors="replace")
            if status is None:
                raise PreprocessTimeout(f"cfgzip-preprocess ran past {limit} s (preprocess_timeout_s)")
            if status != 0:
                first = next((l for l in stderr.splitlines() if l.startswith("Error")), stderr.strip()[:500])
                raise CompileError(f"cfgzip-preprocess failed (exit {status}): {first}")
            timings = {m.group(1): float(m.group(2)) for m in re.finditer(r"cfgzip timing: (\w+)_s=([0-9.]+)", stderr)}
            meta = {
                "preprocess_s": elapsed,
                "preprocess_peak_rss_mb": proc.peak_rss_mb,   # the child's own peak (wait4)
                "timings": timings,
                "command": cmd,
            }
            (work / "out" / "meta.json").write_text(json.dumps(meta, indent=1))
            (work / "out" / "grammar.gbnf").write_text(ebnf)
            if out_dir.exists():
                shutil.rmtree(out_dir)
            os.replace(work / "out", out_dir)
            return meta
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _load(self, out_dir: Path, ebnf: str, tokenizer) -> None:
        import xgrammar as xgr
        from cfgzip import XgrammarProcessor

        try:
            translator, compiled = XgrammarProcessor.load_and_compile(
                str(out_dir), None, ebnf, batch_size=1, device="cpu",
                stop_token_ids=[tokenizer.eos_id], max_threads=int(self.opts["max_threads"]),
            )
        except RuntimeError as err:
            raise CompileError(f"xgrammar (under cfgzip) refused the grammar: {err}") from err
        tc = translator.token_classes.numpy().astype(np.int64)
        n_classes = translator.n_classes
        if tc.shape[0] != tokenizer.vocab_size:
            raise CompileError(
                f"cfgzip: token_classes has {tc.shape[0]} entries, the vocabulary {tokenizer.vocab_size}"
            )
        valid = tc >= 0
        valid[translator.invalid_tokens.numpy().astype(np.int64)] = False
        for sid in tokenizer.special_ids.values():  # specials never appear as text; EOS comes from the matcher
            if sid != tokenizer.eos_id:
                valid[sid] = False
        # index n_classes is a bit that is always 0: masked tokens gather it
        self._gather = np.where(valid, tc, n_classes).astype(np.intp)
        self._class_of = tc
        self._valid = valid
        self.n_classes = n_classes
        self.matcher = xgr.GrammarMatcher(compiled, terminate_without_stop_token=False)
        self._compiled = compiled
        self._batch_bufs: dict = {}
        self._cls_buf = xgr.allocate_token_bitmask(1, n_classes)
        self._cls_np = self._cls_buf.numpy()[0]
        self._bits = np.zeros(self._cls_np.shape[0] * 32 + 1, dtype=np.uint8)
        self._full_bits = np.zeros(((tokenizer.vocab_size + 31) // 32) * 32, dtype=np.uint8)
        self.vocab_size = tokenizer.vocab_size
        self._info.update(
            n_classes=n_classes,
            n_invalid_tokens=int(tokenizer.vocab_size - valid.sum()),
            eos_class=int(tc[tokenizer.eos_id]),
        )

    # -- per step -------------------------------------------------------------------------------
    def reset(self) -> None:
        self.matcher.reset()

    def class_mask_ids(self) -> np.ndarray:
        """Allowed class ids at this step (for tests and debugging)."""
        self.matcher.fill_next_token_bitmask(self._cls_buf)
        bits = np.unpackbits(self._cls_np.view(np.uint8), bitorder="little")[: self.n_classes]
        return np.flatnonzero(bits)

    def fill_mask(self, out: np.ndarray) -> None:
        self.matcher.fill_next_token_bitmask(self._cls_buf)
        n = self._cls_np.shape[0] * 32
        self._bits[:n] = np.unpackbits(self._cls_np.view(np.uint8), bitorder="little")
        self._bits[self.n_classes:] = 0
        np.take(self._bits, self._gather, out=self._full_bits[: self.vocab_size])
        out.view(np.uint8)[:] = np.packbits(self._full_bits, bitorder="little")[: out.shape[0] * 4]

    def commit(self, token_id: int) -> bool:
        token_id = int(token_id)
        if not (0 <= token_id < self.vocab_size) or not self._valid[token_id]:
            return False
        return bool(self.matcher.accept_token(int(self._class_of[token_id])))

    def info(self) -> dict:
        return dict(self._info)

    # -- batch ------------------------------------------------------------------------------------------
    def fork(self) -> "CFGzipEngine":
        """A new class-level matcher over the same compiled grammar and token classes, at the empty prefix."""
        import xgrammar as xgr

        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)
        other.opts = dict(self.opts)
        other.matcher = xgr.GrammarMatcher(self._compiled, terminate_without_stop_token=False)
        other._cls_buf = xgr.allocate_token_bitmask(1, self.n_classes)
        other._cls_np = other._cls_buf.numpy()[0]
        other._bits = np.zeros_like(self._bits)
        other._full_bits = np.zeros_like(self._full_bits)
        other._batch_bufs = self._batch_bufs
        return other

    def fill_masks(self, seqs: Sequence["CFGzipEngine"], out: np.ndarray) -> None:
        """XGrammar's batch matcher fills the class masks of every sequence, then one gather over the token
        classes expands all rows at once."""
        import xgrammar as xgr

        B = len(seqs)
        for s in seqs:
            if getattr(s, "_compiled", None) is not self._compiled:
                raise ValueError("cfgzip: fill_masks takes this engine and its forks only (one compiled grammar)")
        if out.ndim != 2 or out.shape[0] < B or not out.flags.c_contiguous or out.dtype != np.int32:
            raise ValueError(f"cfgzip: out must be a C-contiguous [>= {B}, words] int32 array")
        bufs = self._batch_bufs
        if bufs.get("B", 0) < B:
            cw = self._cls_np.shape[0]
            bufs.update(B=B, cls=np.zeros((B, cw), dtype=np.int32), bits=np.zeros((B, cw * 32 + 1), dtype=np.uint8),
                        full=np.zeros((B, out.shape[1] * 32), dtype=np.uint8),
                        batch=bufs.get("batch") or xgr.BatchGrammarMatcher(max_threads=int(self.opts["max_threads"])))
        cls, bits, full = bufs["cls"][:B], bufs["bits"][:B], bufs["full"][:B]
        bufs["batch"].batch_fill_next_token_bitmask([s.matcher for s in seqs], cls)
        n = cls.shape[1] * 32
        bits[:, :n] = np.unpackbits(cls.view(np.uint8), axis=1, bitorder="little")
        bits[:, self.n_classes:] = 0
        np.take(bits, self._gather, axis=1, out=full[:, : self.vocab_size])
        out[:B].view(np.uint8)[:] = np.packbits(full, axis=1, bitorder="little")[:, : out.shape[1] * 4]
