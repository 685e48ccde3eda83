"""The one engine interface every constrained-decoding engine implements.

Contract (read by the runner, the audit and every adapter):

* ``compile(grammar, tokenizer)`` is called once; its wall time is the engine's *init* time. It raises
  :class:`CompileError` (with a reason a person can act on) when the engine cannot take the grammar.
* ``reset()`` returns to the empty prefix. It is cheap and untimed.
* ``fill_mask(out)`` writes the set of allowed next tokens into ``out``, a buffer the runner owns:
  a 1-D ``int32`` array of ``ceil(vocab_size / 32)`` words, token ``i`` allowed iff bit ``i % 32`` of
  word ``i // 32`` is set (the layout XGrammar and LLGuidance use). EOS is allowed exactly when the prefix
  is a complete sentence. The engine must overwrite every word; it never checks the oracle token itself.
* ``commit(token_id)`` advances by one token and returns False when the engine refuses it (the state is
  then unspecified; the runner stops the sample).
* Engines never print, never exit the process and keep no module-level state set by the runner.
"""
from __future__ import annotations

import dataclasses
import enum
import functools
import os
import types
import typing
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Sequence

import numpy as np


class Outcome(str, enum.Enum):
    """Typed outcome of one sample (and of a whole run when it could not start)."""

    OK = "ok"                      # oracle token allowed at every step and EOS allowed at the end
    REJECTED = "rejected"          # the oracle token was not in the mask (or commit refused it)
    NO_EOS = "no_eos"              # all tokens accepted but EOS not allowed at the end
    TIMEOUT = "timeout"            # per-sample or per-run time limit hit
    OOM = "oom"                    # memory limit hit
    ENGINE_ERROR = "engine_error"  # the engine reported an error state (e.g. a parser work limit was hit)
    CRASH = "crash"                # the engine raised or the worker process died
    COMPILE_ERROR = "compile_error"  # the engine refused the grammar (typed, with a reason)
    SKIPPED = "skipped"            # not attempted (the run time limit was reached first)

    @property
    def attempted(self) -> bool:
        """False for a sample that never ran (its engine did not compile, or the run's time ran out first)."""
        return self not in (Outcome.COMPILE_ERROR, Outcome.SKIPPED)


@dataclass(frozen=True)
class Profile:
    """The language an engine implements, in terms the reference checker executes exactly.

    The harness's own language is ``Profile()`` (all defaults). An engine whose language differs declares how
    (``Engine.profile()``), and the audit compares its masks both with the harness's language and with the
    reference run under this profile: a difference the profile does not explain is a disagreement.
    """

    lexing: str = "scannerless"      # scannerless | longest_match (contextual maximal munch) | standard (Lark's
                                     # standard lexer: all terminals compete, string literals reserved) |
                                     # dynamic (each terminal its own longest match only: Lark's lexer="dynamic")
    trailing_ignore: bool = True     # ignored text may follow a sentence that no terminal can extend
    leading_ignore: bool = False     # ignored text may come before the first terminal
    case_fold: str = "python_re"     # python_re (Lark) | unicode_simple (CaseFolding.txt C+S) | ascii
    regex_classes: str = "unicode"   # unicode (\s \w \d as Python's re on str) | ascii | uts18 (Unicode
                                     # properties, as Rust's regex crate: \s White_Space, \w Alphabetic+M+Nd+Pc)
    token_bytes: str = "utf8"        # utf8 (a candidate token is its bytes) | latin1 (each byte of a candidate token
                                     # read as the code point of its value, U+0000-U+00FF, as transformers-cfg's
                                     # byte path does; the committed prefix stays UTF-8)


class CompileError(Exception):
    """The engine cannot take this grammar; ``str(err)`` says why (e.g. 'not LALR(1): ...')."""


class CompileTimeout(CompileError):
    """The engine gave up compiling on a time budget of its own (an option): the same grammar may compile on a
    faster or idler machine, so the runner retries it on resume (a plain CompileError is reused)."""


class EngineError(RuntimeError):
    """The engine refused to go on (an error state it reports, such as a work limit): a typed outcome."""


def cache_root() -> Path:
    """Where every on-disk cache of the project lives, one folder per user: ``$GCDBENCH_CACHE``, else
    ``~/.cache/gcdbench``. A run that times compiles from nothing (MaskBench's TTFM) points it at a fresh folder."""
    return Path(os.path.expanduser(os.environ.get("GCDBENCH_CACHE") or "~/.cache/gcdbench"))


def cache_dir_of(name: str, cache_dir=None) -> Path:
    """An engine's or a loader's cache folder: its ``cache_dir`` option when set, else ``cache_root()/<name>``."""
    return Path(os.path.expanduser(cache_dir)) if cache_dir else cache_root() / name


@dataclass(frozen=True)
class GrammarSpec:
    """A grammar in the project's source format (Lark), plus what engines need to know about it."""

    name: str
    lark: str                 # full text of the .lark source
    start: str = "start"
    path: str | None = None   # where it came from, for messages
    #: the JSON Schema (JSON text) this grammar was converted from, for engines with their own schema compiler
    #: (``Engine.reads_json_schema``); None for a grammar written in Lark
    json_schema: str | None = None
    #: why the harness has no Lark grammar for this source (a schema keyword the converter cannot express):
    #: every engine that reads ``lark`` records it as a compile_error without compiling
    refusal: str | None = None

    def key(self) -> str:
        """Content hash, used to key on-disk caches of compiled artifacts."""
        import hashlib

        text = f"{self.start}\n{self.lark}"
        if self.json_schema is not None or self.refusal is not None:   # a plain Lark grammar keeps its old key
            text += f"\n{self.json_schema}\n{self.refusal}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def n_mask_words(vocab_size: int) -> int:
    return (vocab_size + 31) // 32


def allocate_mask(vocab_size: int) -> np.ndarray:
    return np.zeros(n_mask_words(vocab_size), dtype=np.int32)


def mask_get(mask: np.ndarray, token_id: int) -> bool:
    return bool((int(mask[token_id >> 5]) >> (token_id & 31)) & 1)


def mask_to_ids(mask: np.ndarray, vocab_size: int) -> np.ndarray:
    """Allowed token ids of a packed mask, ascending."""
    bits = np.unpackbits(mask.view(np.uint8), bitorder="little")[:vocab_size]
    return np.flatnonzero(bits)


def mask_count(mask: np.ndarray, vocab_size: int) -> int:
    """Number of allowed ids below ``vocab_size`` (padding bits of the last word are ignored).

    A popcount over the packed words: no per-token array is allocated, so calling it between two timed masks
    does not evict the engine's working set from the caches the way ``np.unpackbits`` over 150k bits does.
    """
    words = mask.view(np.uint32)
    full, rest = divmod(vocab_size, 32)
    n = int(np.bitwise_count(words[:full]).sum(dtype=np.int64))
    if rest:
        n += int(words[full] & np.uint32((1 << rest) - 1)).bit_count()
    return n


def ids_to_mask(ids, vocab_size: int) -> np.ndarray:
    bits = np.zeros(n_mask_words(vocab_size) * 32, dtype=np.uint8)
    bits[np.asarray(list(ids), dtype=np.int64)] = 1
    return np.packbits(bits, bitorder="little").view(np.int32).copy()


# ---------------------------------------------------------------------------------------------------------------
# the options spec: each engine declares its options once, as a dataclass of ``option(...)`` fields
# ---------------------------------------------------------------------------------------------------------------
def option(default, help: str, choices: tuple | None = None, former: str | None = None):
    """One engine option: its default, a one-line ``help``, the allowed values (``choices``; None: any value of
    the declared type) and the name it had before (``former``: stored cells still name it so; see
    :func:`current_options`). The type is the field's annotation; Hydra's schema, the README's option tables and
    ``Engine.__init__``'s checks all read this one declaration."""
    meta = {"help": help, "choices": tuple(choices) if choices is not None else None, "former": former}
    return dataclasses.field(default=default, metadata=meta)


@dataclass(frozen=True)
class OptionSpec:
    """One declared option, read from an options dataclass (:func:`option_specs`)."""

    name: str
    type: Any            # the resolved annotation (int, str | None, ...)
    default: Any
    help: str
    choices: tuple | None
    former: str | None

    def accepts(self, value) -> bool:
        """``value`` is of the declared type (None only for an optional option; an int where a float is declared;
        a path where a string is declared) and, with ``choices``, one of them."""
        if self.choices is not None:
            return any(value == c and type(value) is type(c) for c in self.choices)
        kinds = typing.get_args(self.type) if typing.get_origin(self.type) in (typing.Union, types.UnionType) \
            else (self.type,)
        if value is None:
            return type(None) in kinds or self.type is Any
        for kind in kinds:
            if kind is Any or kind is bool and isinstance(value, bool):
                return True
            if kind in (int, float) and isinstance(value, bool):
                continue
            if kind is float and isinstance(value, (int, float)) or kind is str and isinstance(value, (str, os.PathLike)):
                return True
            if kind not in (bool, float, str, type(None)) and isinstance(value, kind):
                return True
        return False

    def describe(self) -> str:
        """The allowed values in words: ``one of ['cpu', 'cuda']`` or ``an int (or null)``."""
        if self.choices is not None:
            return str(list(self.choices))
        kinds = typing.get_args(self.type) or (self.type,)
        names = [getattr(k, "__name__", str(k)) for k in kinds if k is not type(None)]
        return f"a {' or '.join(names)}" + (" (or null)" if type(None) in kinds else "")


@functools.lru_cache(maxsize=None)
def option_specs(options_cls) -> tuple[OptionSpec, ...]:
    """The declared options of an options dataclass, in declaration order, with their annotations resolved."""
    hints = typing.get_type_hints(options_cls)
    out = []
    for f in dataclasses.fields(options_cls):
        if f.default is dataclasses.MISSING:
            raise TypeError(f"{options_cls.__name__}.{f.name}: an engine option needs a default (declare it with "
                            "gcdbench.parsers.base.option(default, help))")
        m = f.metadata
        out.append(OptionSpec(f.name, hints[f.name], f.default, m.get("help", ""), m.get("choices"), m.get("former")))
    return tuple(out)


@dataclass
class NoOptions:
    """The options of an engine that has none."""


class Engine(ABC):
    """A grammar-constrained decoding engine seen by the harness."""

    #: registry name (``engine=<name>`` on the command line)
    name: str = "engine"
    #: engine info() keys worth a column in the report's artifact table: column -> path into info()
    artifact_keys: ClassVar[dict[str, tuple[str, ...]]] = {}
    #: the engine's options, declared once: a dataclass whose fields are ``option(default, help, choices)``
    #: (Hydra's schema of ``engine/<name>``, the README's option tables and the checks below read it)
    Options: ClassVar[type] = NoOptions
    #: the option that sets how many threads the engine (its batch path ``fill_masks`` included) may use; the
    #: runner's ``batch.threads`` sets it. None: the batch path runs on the calling thread only
    threads_option: ClassVar[str | None] = None
    #: ``"module:function"`` building :meth:`cuda_kernels`; None: the engine has no CUDA kernels
    cuda_signatures: ClassVar[str | None] = None
    #: the GPU agenda of an engine with CUDA kernels (``experiments/gpu_agenda.sh``): ``cuda`` / ``cpu``: the
    #: option values selecting each backend; ``sweep``: (option, values) of the occupancy sweep; ``dry_run``: the
    #: ``cuda`` options and sweep values for numba's CUDA simulator. None: no agenda
    cuda_agenda: ClassVar[dict | None] = None
    #: registry name of the engine whose masks this one computes faster (the same language, e.g. over a compressed
    #: vocabulary); the report's seed-002 tables set the two side by side. None: it speeds up no other engine
    accelerates: ClassVar[str | None] = None
    #: True for an engine that compiles ``GrammarSpec.json_schema`` with its own JSON Schema compiler (it then
    #: runs schemas the harness's converter refuses); False: it reads ``GrammarSpec.lark``
    reads_json_schema: ClassVar[bool] = False
    #: registry name of the engine whose per-mask time this one's speed targets are stated against (the report's
    #: grammar-shapes section gives this engine's p50 and p99 over that one's per shape). None: no such target
    speed_baseline: ClassVar[str | None] = None
    #: (colour, marker) of this engine's series in every figure (its other configs: lighter shades of the colour);
    #: None: a colour of matplotlib's tab20 that no engine uses
    plot_style: ClassVar[tuple[str, str] | None] = None
    #: True for the engines built in this project: the figures draw them thicker and on top, easy to find
    plot_emphasis: ClassVar[bool] = False
    #: the work counters a by-work table shows per mask, over all masks and over the slowest 1%
    #: (``report.by_work``): column -> the counters summed into it. Empty: no such columns
    headline_counters: ClassVar[dict[str, tuple[str, ...]]] = {}

    def __init__(self, **options):
        self.opts = self.check_options(options)

    @classmethod
    def check_options(cls, options: dict) -> dict:
        """``options`` with the defaults filled in; an unknown option, or a value outside an option's type or
        choices, raises one ValueError naming the valid ones."""
        specs = {s.name: s for s in option_specs(cls.Options)}
        if not specs and cls.options():   # an adapter written before the spec: say how to declare its options
            raise TypeError(f"engine {cls.name!r} overrides options() without an Options dataclass: declare its "
                            "options as `Options = <dataclass of gcdbench.parsers.base.option(default, help)>`")
        unknown = sorted(set(options) - set(specs))
        if unknown:
            raise ValueError(f"engine {cls.name!r}: unknown option(s) {unknown}; valid: {sorted(specs)}")
        for key, value in options.items():
            spec = specs[key]
            if not spec.accepts(value):
                raise ValueError(f"engine {cls.name!r}: {key}={value!r} is not allowed; valid: {spec.describe()} "
                                 f"(default {spec.default!r})")
        return {**cls.options(), **options}

    @classmethod
    def options(cls) -> dict:
        """Accepted options with their defaults (from the ``Options`` dataclass)."""
        return {s.name: s.default for s in option_specs(cls.Options)}

    @classmethod
    def missing(cls) -> str | None:
        """Why this engine cannot run here (a package it needs is absent, with the line that installs it), or None.
        Its module imports without that package, so its options stay readable (schema, option tables)."""
        return None

    @abstractmethod
    def version(self) -> str:
        """Version string of the engine (package version, or the project's for built-in engines)."""

    @abstractmethod
    def compile(self, grammar: GrammarSpec, tokenizer) -> None:
        """Prepare for ``grammar`` over ``tokenizer`` (a :class:`gcdbench.parsers.tokenizers.Tokenizer`)."""

    @abstractmethod
    def reset(self) -> None:
        """Go back to the empty prefix."""

    @abstractmethod
    def fill_mask(self, out: np.ndarray) -> None:
        """Write the next-token bitmask into ``out`` (see the module docstring)."""

    @abstractmethod
    def commit(self, token_id: int) -> bool:
        """Advance by ``token_id``; False when the engine refuses it."""

    def info(self) -> dict:
        """Extra facts to store in run.json (grammar form used, class counts, cache hits...)."""
        return {}

    def work_kind(self, work: dict) -> str:
        """The kind of work one mask did, from the work counters that moved in it (``work``: counter -> amount,
        only those that moved), for the bench's split of a cell's time (``bench masks --by-work``). The default
        names the counters that moved; an engine with counters may group them into fewer, named kinds."""
        return "+".join(sorted(work)) or "no counter moved"

    def profile(self) -> Profile:
        """The language this engine (with its options) implements; the audit checks masks against it."""
        return Profile()

    @classmethod
    def complexity(cls, ambiguous: bool = False) -> str:
        """Per-mask cost class for Table 1's "Cmplx." column (``ambiguous``: the grammar is highly ambiguous)."""
        return "?"

    @classmethod
    def cuda_kernels(cls) -> dict:
        """The engine's CUDA kernels, for the PTX/SASS report and the GPU agenda: kernel name -> (numba CUDA
        dispatcher, argument types of a real launch). Building it may compile a small grammar on the CPU; no GPU
        is needed. Empty: the engine has no CUDA kernels. Built by the function ``cuda_signatures`` names
        (``"module:function"``, imported on use, so an engine's module never imports its own signature builder)."""
        if not cls.cuda_signatures:
            return {}
        import importlib

        module, _, func = cls.cuda_signatures.partition(":")
        return getattr(importlib.import_module(module), func)()

    def fork(self) -> "Engine":
        """A new sequence over the same compiled grammar, at the empty prefix (batch mode); shares the
        compiled artifacts, owns its own state. Engines that cannot share raise NotImplementedError."""
        raise NotImplementedError(f"engine {self.name!r} has no fork()")

    def fill_masks(self, seqs: Sequence["Engine"], out: np.ndarray) -> None:
        """Masks of several sequences (``self`` and forks of it) into the rows of ``out`` ([B, words] int32),
        one call per decoding step of a batch; row ``i`` is ``seqs[i]``'s mask, exactly what its ``fill_mask``
        writes. Default: one ``fill_mask`` per sequence; engines with a native batch path override it. An error
        of the batch call may be raised as is: the runner then calls each sequence's ``fill_mask`` to find which
        sequence failed."""
        for i, s in enumerate(seqs):
            s.fill_mask(out[i])

    def commit_many(self, seqs: Sequence["Engine"], tokens: Sequence[int]) -> list:
        """Commit ``tokens[i]`` to ``seqs[i]`` (``self`` and forks of it), one call per decoding step of a batch.
        Returns one entry per sequence: what its ``commit`` returns (bool), or the exception it raised, so that a
        failure ends that sequence only. Default: one ``commit`` per sequence; engines with a native batch path
        override it (the same results, never raising for one sequence's fault)."""
        results: list = []
        for s, t in zip(seqs, tokens):
            try:
                results.append(bool(s.commit(t)))
            except Exception as err:   # noqa: BLE001 - that sequence's failure, reported in its entry
                results.append(err)
        return results

    def close(self) -> None:
        """Release resources (GPU memory, threads)."""
