"""Every result file of a cell, declared once: the columns of ``steps``, ``samples``, ``audit`` and ``batch_steps``
(pyarrow schemas, units in the names: ``_us`` microseconds, ``_s`` seconds, ``_mb`` MiB) and the keys of
``run.json`` (:class:`RunRecord`). Writers build their rows and tables from here and readers read through
:func:`read_run` / :func:`read_rows`, so a format change is one edit here plus a migration.

Versions: every new ``run.json`` carries ``schema_version`` (:data:`SCHEMA_VERSION`), every new parquet file the
same number in its schema metadata. A file without one is version 0 (every result stored before this module):
its columns and keys are those of version 1, so it is read as is. Any other version is refused with one line
naming the file, its version and the versions this code reads. :func:`result_files_markdown` renders the
columns as the docs' "Result files" tables (docs/reference/result-files.md), so they can be checked against this module.
"""
from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import pyarrow as pa

from gcdbench.experiments.rowlayout import (LAYOUTS, WORKER_BATCH_STEP, WORKER_BATCH_SUMMARY,  # noqa: F401
                                            WORKER_STEP, RowLayout)

#: the version every writer stamps; readers accept :data:`SUPPORTED_VERSIONS`
SCHEMA_VERSION = 1
#: 0: results stored before the schema module (no version key), read as version 1
SUPPORTED_VERSIONS = (0, 1)
#: the key of the version in a parquet file's schema metadata
PARQUET_VERSION_KEY = b"gcdbench.schema_version"


class SchemaVersionError(ValueError):
    """A result file of a version this code does not read (the message is one line)."""


# --------------------------------------------------------------------------------------------------------------
# columns
# --------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Column:
    """One column of a result table: its name (unit suffixed), arrow type and a one-line meaning."""

    name: str
    type: pa.DataType
    doc: str

    def field(self) -> pa.Field:
        return pa.field(self.name, self.type, metadata={"doc": self.doc})


_STR = pa.large_string()   # what pandas writes for text columns: stored files and new ones read alike
_KEY = (
    Column("engine", _STR, "engine name (the adapter's registry name)"),
    Column("config", _STR, "engine config label: the name plus its non-default options"),
    Column("dataset", _STR, "dataset name"),
    Column("tokenizer", _STR, "tokenizer name"),
    Column("sample_id", _STR, "the sample's id within its dataset"),
)

#: one row per timed mask: what the worker measures (:data:`WORKER_STEP`) plus the cell key and outcome
STEP_COLUMNS_DECLARED = _KEY + (
    Column("step", pa.int64(), "index of the mask in the sample (0 = empty prefix; the last is the EOS step)"),
    Column("prefix_tokens", pa.int64(), "tokens before this mask; equals step (derived when the table is built)"),
    Column("prefix_bytes", pa.int64(), "bytes of the prefix before this mask"),
    Column("mask_us", pa.float64(), "time of the fill call (batch mode: the step's time / live sequences)"),
    Column("commit_us", pa.float64(), "time of committing the oracle token after this mask (0: not committed; "
                                      "batch mode: the sequence's share of the step's commit_many call)"),
    Column("n_allowed", pa.int64(), "tokens the mask allows"),
    Column("oracle_allowed", pa.bool_(), "the sample's next token (EOS at the last step) is in the mask"),
    Column("outcome", _STR, "the sample's outcome (parsers.base.Outcome), repeated on each of its rows"),
)
#: batch mode with ``batch.steps=all``: the step rows also name their batch step
STEP_BATCH_EXTRA = (Column("batch_step", pa.int64(), "batch mode: the batch step (fill_masks call) of this mask"),)
#: numba's compiler lock taken inside the mask's timer (experiments/jitwatch.py): rows stored before the column
#: have none (not measured); a row with jit > 0 is left out of the per-mask statistics
STEP_JIT = Column("jit", pa.int64(), "times numba loaded or compiled machine code inside this mask's timer (0: "
                                     "none; such a mask is left out of the per-mask statistics; null: not measured)")

#: repeats (issue 66): which repeat of its cell a row belongs to; rows stored before the column have none, and a
#: reader takes the cell's ``identity.repeat`` (absent: 0) for them
ROW_REPEAT = Column("repeat", pa.int64(), "which repeat of the cell (repeats=R, issue 66) the row belongs to: "
                                          "run.json identity.repeat (0: the first, or the cell run once; null: "
                                          "stored before the column)")

SAMPLE_COLUMNS_DECLARED = _KEY + (
    Column("outcome", _STR, "typed outcome of the sample (parsers.base.Outcome)"),
    Column("message", _STR, "why it ended so (empty for ok); at most 2000 characters plus a count"),
    Column("wall_s", pa.float64(), "wall time of the sample in the worker"),
    Column("n_steps", pa.int64(), "masks the sample made"),
    Column("peak_rss_mb", pa.float64(), "the worker's peak resident memory while running it (null: not measured)"),
    Column("session", pa.int64(), "the run session (run.json sessions[].id) that stored the row"),
    Column("git_commit", _STR, "commit the row was measured at"),
    Column("git_dirty", pa.bool_(), "tracked files differed from that commit"),
    Column("host", _STR, "machine's host name"),
)

_EXAMPLES = pa.list_(pa.string())
AUDIT_COLUMNS_DECLARED = _KEY + (
    Column("step", pa.int64(), "the audited step"),
    Column("prefix", _STR, "the prefix's last 200 characters"),
    Column("profile", _STR, "the engine's declared profile (fields differing from the harness's language)"),
    Column("n_engine", pa.int64(), "tokens the engine allows"),
    Column("n_reference", pa.int64(), "tokens the reference allows in the harness's language"),
    Column("n_profile", pa.int64(), "tokens the reference allows in the declared profile"),
    Column("agree", pa.bool_(), "same as agree_language (kept for older readers)"),
    Column("agree_language", pa.bool_(), "the mask equals the reference's in the harness's language"),
    Column("agree_profile", pa.bool_(), "the mask equals the reference's in the declared profile"),
    Column("n_false_allow", pa.int64(), "tokens allowed by the engine, not by the language"),
    Column("n_false_block", pa.int64(), "tokens allowed by the language, not by the engine"),
    Column("n_false_allow_profile", pa.int64(), "as n_false_allow, against the declared profile"),
    Column("n_false_block_profile", pa.int64(), "as n_false_block, against the declared profile"),
    Column("false_allow_examples", _EXAMPLES, "a few false allows (token text) against the language"),
    Column("false_block_examples", _EXAMPLES, "a few false blocks against the language"),
    Column("false_allow_examples_profile", _EXAMPLES, "a few false allows against the declared profile"),
    Column("false_block_examples_profile", _EXAMPLES, "a few false blocks against the declared profile"),
)
#: batch mode: the audited batch row equalled the sequence's own fill_mask
AUDIT_BATCH_EXTRA = (Column("agree_single_mode", pa.bool_(),
                            "batch mode: the batch row equals the sequence's own fill_mask at this step"),)

#: one row per batch step (one fill_masks call): the per-step summary every batch cell keeps
BATCH_STEP_COLUMNS_DECLARED = (
    Column("session", pa.int64(), "the run session of the step"),
    Column("run", pa.int64(), "the worker run within the session (a worker compiled again starts a new one)"),
    Column("batch_step", pa.int64(), "index of the step within its worker run"),
    Column("size", pa.int64(), "B, the batch's slots"),
    Column("live", pa.int64(), "sequences in the call"),
    Column("step_us", pa.float64(), "time of the fill_masks call (of the per-sequence loop on a fallback step)"),
    Column("commit_us", pa.float64(), "time of the step's commit_many call (the commits of the step together)"),
    Column("fallback", pa.int64(), "0; 1: the batch call raised and a sequence's own fill_mask failed too; "
                                   "2: the batch call raised where every fill_mask worked"),
)
#: added in version 1: the step's rows in steps.parquet (live less the sequences whose fill failed); each of them
#: has mask_us = step_us / live, so a cell's mask-time distribution is rebuilt from the summary alone
BATCH_STEP_MASKS = Column("masks", pa.int64(), "masks the step gave sequences (live less failed fills; each has "
                                               "mask_us = step_us / live); null: not known (written before the "
                                               "column, on a step where a fill failed)")

TABLES = {
    "steps": STEP_COLUMNS_DECLARED,
    "samples": SAMPLE_COLUMNS_DECLARED,
    "audit": AUDIT_COLUMNS_DECLARED,
    "batch_steps": BATCH_STEP_COLUMNS_DECLARED + (BATCH_STEP_MASKS,),
}
#: optional columns a table may carry (batch mode; the steps' ``jit`` and the rows' ``repeat``, absent from rows
#: stored before them: such files still conform and read as they are)
EXTRAS = {"steps": STEP_BATCH_EXTRA + (STEP_JIT, ROW_REPEAT), "audit": AUDIT_BATCH_EXTRA, "samples": (ROW_REPEAT,),
          "batch_steps": ()}
#: the cell's files, ``run.json`` first
RESULT_FILES = ("run.json", *(f"{t}.parquet" for t in TABLES))


def _extras(table: str, extra) -> tuple:
    """``table``'s optional columns selected by ``extra``: True (all), False (none) or a collection of names."""
    if isinstance(extra, bool):
        return EXTRAS[table] if extra else ()
    return tuple(c for c in EXTRAS[table] if c.name in extra)


def columns(table: str, extra=False) -> list[str]:
    """Column names of ``table`` in file order (``extra``: with its optional columns, all or those named)."""
    return [c.name for c in TABLES[table] + _extras(table, extra)]


#: the columns that say which cell and sample a row belongs to (the store adds them to every row)
KEY_COLUMNS = tuple(c.name for c in _KEY)


def row(table: str, **values) -> dict:
    """One row of ``table`` without its key columns (:data:`KEY_COLUMNS`), in file order, from keywords: every
    declared column must be given (its batch-mode extras may be), and none other (ValueError naming them)."""
    names = [n for n in columns(table) if n not in KEY_COLUMNS]
    extras = [c.name for c in EXTRAS[table]]
    missing = [n for n in names if n not in values]
    unknown = sorted(set(values) - set(names) - set(extras))
    if missing or unknown:
        raise ValueError(f"a {table} row must give the declared columns (experiments/schema.py): missing {missing}, "
                         f"undeclared {unknown}")
    return {n: values[n] for n in names + [e for e in extras if e in values]}


def arrow_schema(table: str, extra=False) -> pa.Schema:
    """The pyarrow schema a writer uses, stamped with :data:`SCHEMA_VERSION`."""
    cols = TABLES[table] + _extras(table, extra)
    return pa.schema([c.field() for c in cols], metadata={PARQUET_VERSION_KEY: str(SCHEMA_VERSION).encode()})


# --------------------------------------------------------------------------------------------------------------
# rows in shared memory (the worker's step log and slot journal): named fields over a float64 buffer
# --------------------------------------------------------------------------------------------------------------
def _python_type(t: pa.DataType):
    if pa.types.is_boolean(t):
        return bool
    if pa.types.is_integer(t):
        return int
    if pa.types.is_floating(t):
        return float
    return None


def check_layout(layout: RowLayout) -> None:
    """A worker row layout (``experiments/rowlayout.py``) names declared columns of its table, with their types;
    ValueError otherwise (checked for every layout when this module is imported)."""
    decl = {c.name: c for c in TABLES[layout.table] + EXTRAS[layout.table]}
    unknown = [n for n in layout.names if n not in decl]
    if unknown:
        raise ValueError(f"{unknown} are not columns of {layout.table}; valid: {sorted(decl)}")
    wrong = [n for n, k in zip(layout.names, layout.kinds) if _python_type(decl[n].type) is not k]
    if wrong:
        raise ValueError(f"{layout.table} layout types of {wrong} differ from the declared ones")


for _layout in LAYOUTS:
    check_layout(_layout)


# --------------------------------------------------------------------------------------------------------------
# tables: build, check, read
# --------------------------------------------------------------------------------------------------------------
def to_table(table: str, df) -> pa.Table:
    """A pandas frame as a pyarrow table of ``table``'s declared schema (columns in file order; a declared
    extra column is kept when present; a derived column is filled; any other column is an error)."""
    extra = {c.name for c in EXTRAS[table] if c.name in df.columns}
    names = columns(table, extra)
    for c in _extras(table, extra):   # an optional column absent from older rows of the frame: nulls there
        if pa.types.is_integer(c.type) and df[c.name].isna().any():
            df = df.assign(**{c.name: df[c.name].astype("Int64")})
    if table == "steps" and "prefix_tokens" not in df.columns and "step" in df.columns:
        df = df.assign(prefix_tokens=df["step"])
    if table == "batch_steps" and "masks" not in df.columns and "live" in df.columns:
        df = df.assign(masks=v0_masks(df))   # rows written before the column
    unknown = sorted(set(df.columns) - set(names))
    missing = [n for n in names if n not in df.columns]
    if unknown or missing:
        raise ValueError(f"{table} rows do not match the declared schema (experiments/schema.py): "
                         f"missing {missing}, undeclared {unknown}")
    return pa.Table.from_pandas(df[names], schema=arrow_schema(table, extra), preserve_index=False)


def problems(table: str, schema: pa.Schema) -> list[str]:
    """How a stored file's schema differs from the declared one (empty: it conforms). Version-0 files conform
    too: a column of nulls only (type null) is accepted in place of its declared type, ``masks`` may be absent."""
    decl = {c.name: c.type for c in TABLES[table] + EXTRAS[table]}
    optional = {c.name for c in EXTRAS[table]} | ({"masks"} if table == "batch_steps" else set())
    out = [f"missing column {n}" for n in decl if n not in schema.names and n not in optional]
    for f in schema:
        if f.name not in decl:
            out.append(f"undeclared column {f.name}")
        elif not _compatible(f.type, decl[f.name]):
            out.append(f"column {f.name} is {f.type}, declared {decl[f.name]}")
    return out


def _compatible(got: pa.DataType, want: pa.DataType) -> bool:
    if got == want or pa.types.is_null(got):
        return True
    if pa.types.is_string(got) or pa.types.is_large_string(got):
        return pa.types.is_string(want) or pa.types.is_large_string(want)
    if pa.types.is_list(got) or pa.types.is_large_list(got):
        return pa.types.is_list(want) and _compatible(got.value_type, want.value_type)
    return False


def file_version(schema: pa.Schema) -> int:
    raw = (schema.metadata or {}).get(PARQUET_VERSION_KEY)
    return 0 if raw is None else int(raw)


def check_version(path, version) -> int:
    """``version`` (None: 0) if this code reads it; else :class:`SchemaVersionError` naming the file."""
    v = 0 if version is None else version
    if v not in SUPPORTED_VERSIONS:
        raise SchemaVersionError(f"{path}: schema_version {v!r} is not one this gcdbench reads (supported: "
                                 f"{', '.join(map(str, SUPPORTED_VERSIONS))}); read it with the gcdbench that "
                                 "wrote it, or re-run the cell")
    return v


def read_rows(path, table: str | None = None):
    """A cell's ``<table>.parquet`` as a pandas frame, its version checked (``table``: from the file name)."""
    import pyarrow.parquet as pq

    path = Path(path)
    table = table or path.name.removesuffix(".parquet")
    check_version(path, file_version(pq.read_schema(path)))
    df = pq.read_table(path).to_pandas()
    if table == "batch_steps" and "masks" not in df.columns and "live" in df.columns:
        df["masks"] = v0_masks(df)
    return df


def summary_mask_us(bs):
    """Every mask's ``mask_us`` of a batch cell, rebuilt from its ``batch_steps`` rows (a cell kept with
    ``batch.steps=summary`` has no steps.parquet): each step gave ``masks`` masks of ``step_us / live`` each, the
    same values steps.parquet would hold. None when a row's ``masks`` is unknown (null)."""
    import numpy as np

    if bs["masks"].isna().any():
        return None
    return np.repeat((bs["step_us"] / bs["live"]).to_numpy(dtype=float), bs["masks"].to_numpy(dtype=np.int64))


def v0_masks(bs):
    """``masks`` of batch-step rows written before the column: every live sequence got its mask on a step without
    a failed fill (``fallback`` 0 or 2); on a ``fallback`` 1 step some did not, how many is not stored (null)."""
    import pandas as pd

    return bs["live"].astype("Int64").where(bs["fallback"] != 1, pd.NA)


# --------------------------------------------------------------------------------------------------------------
# run.json
# --------------------------------------------------------------------------------------------------------------
class Identity(TypedDict, total=False):
    """What makes two runs the same cell (a resume must repeat it)."""

    engine: str              # engine name
    config: str              # engine config label (name plus non-default options)
    engine_options: dict     # every engine option, defaults filled in
    grammar_key: str         # digest of the grammar's content
    dataset: str             # dataset name
    dataset_options: dict    # the dataset's config keys
    tokenizer: str           # tokenizer name
    tokenizer_key: str       # digest of the tokenizer's vocabulary
    seed: int                # the run's seed (sample choice, audited steps)
    n_samples: int           # samples in the cell
    samples_digest: str      # digest of the sample ids, texts and stored token ids
    sample_ids: list         # the sample ids in the cell's order
    batch: dict              # batch mode only: {"mode": "batch", "size": B}
    repeat: int              # repeats (issue 66): which repeat of the cell (absent: 0, the first)
    cold: bool               # cold=true: every worker started with empty numba and gcdbench caches (absent: false)


class Init(TypedDict, total=False):
    """One compile of the engine in a worker (single or batch mode), with its warm-up."""

    session: int                     # the session that compiled
    init_s: float                    # the timed compile (grammar and vocabulary)
    import_s: float                  # importing the engine's modules before it (numba loads eager signatures then)
    jit_compile: dict                # numba during import and compile: {jit_s, jit_compiles, jit_locks, jit_functions}
    jit_warmup: dict                 # the same during the warm-up sample
    numba_cache_repaired: list       # damaged numba cache files the compile removed and compiled anew (one line each)
    version: str                     # engine version
    engine_info: dict                # what the engine reports about its compile (cache hit, sizes, ...)
    profile: dict                    # the compiled engine's declared Profile (the audit uses it)
    group: str                       # a dataset of many grammars: the group whose grammar this compile was
    peak_rss_compile_mb: float       # the worker's peak resident memory while compiling
    warmup_s: float                  # the untimed warm-up sample's wall time
    first_mask_us: float             # the warm-up's first mask (cold, empty prefix)
    ttfm_s: float                    # time to first mask: init_s + first_mask_us
    warmup_masks: int                # masks the warm-up made
    warmup_max_mask_us: float        # its slowest mask
    warmup_outcome: str              # its outcome
    warmup_message: str              # its message
    warmup_failed: str               # the warm-up hung, ran out of memory or killed the worker: why
    peak_rss_warmup_mb: float        # peak resident memory during the warm-up
    peak_rss_method: str             # vmhwm_reset (per phase) or lifetime
    batch_size: int                  # batch mode: the sequences made
    sequences: str                   # batch mode: how (fork, or compiled copies)
    sequences_s: float               # batch mode: time to make them
    warmup_steps: int                # batch mode: warm-up batch steps
    warmup_truncated_at_step: int    # batch mode: the warm-up stopped at this step (its budget)


class Session(TypedDict, total=False):
    """One invocation of the run on a cell (a resume adds one)."""

    id: int                          # 1, 2, ... (samples.parquet session)
    status: str                      # running, finished, interrupted (killed before it ended)
    started: str                     # local time it started
    ended: str                       # local time it ended
    command: str                     # the command line
    git_commit: str                  # commit of the code
    git_dirty: bool                  # tracked files differed from it
    git_dirty_correction: str        # a note correcting git_dirty after the fact
    machine: dict                    # provenance.machine_info()
    versions: dict                   # provenance.package_versions()
    engine_version: str              # the engine's version()
    limits: dict                     # the limits the session ran under
    audit_per_sample: int            # audited steps per sample
    audit_samples: Any               # audited samples (null: all)
    warmup: bool                     # an untimed warm-up sample after each compile
    inits: list                      # every compile of the session (Init)
    group_failures: dict             # a dataset of many grammars: group id -> its compile failure
    samples_run: int                 # samples it stored
    peak_rss_method: str             # how peak memory was measured
    compile_failure: dict            # {message, kind, engine_version[, reused]} of a failed compile
    batch: dict                      # batch mode: {size, threads_option, threads, steps: summary or all}
    batch_runs: list                 # batch mode: one record per worker run (steps, how it ended)
    audit_error: str                 # why the audit did not run
    audit_skipped: dict              # {sample id: reason} of audits beyond the cell's limits
    machine_state: dict              # load, CPU clock and governor before/after, others' CPU time (alone?)


class RunRecord(TypedDict, total=False):
    """``run.json``: the cell's identity, every session, and summaries of the stored rows."""

    schema_version: int              # this module's SCHEMA_VERSION when written (absent: 0)
    identity: Identity               # what makes two runs the same cell
    engine: str                      # = identity.engine
    config: str                      # = identity.config
    engine_options: dict             # = identity.engine_options
    dataset: str                     # = identity.dataset
    tokenizer: str                   # = identity.tokenizer
    grammar_key: str                 # = identity.grammar_key
    seed: int                        # = identity.seed
    n_samples: int                   # = identity.n_samples
    grammar: str                     # the grammar's name
    dataset_meta: dict               # what the dataset says about itself (source, ambiguous, ...)
    vocab_size: int                  # tokens in the vocabulary
    sessions: list                   # every Session, oldest first
    batch: dict                      # batch mode: {mode, size, threads, threads_option, steps, full_steps, steps_kept}
    inits: list                      # every Init of every session
    init_s: float                    # the first compile's init time
    ttfm_s: float                    # the first compile's time to first mask
    peak_rss_compile_mb: float       # the highest compile peak
    limits: dict                     # the latest session's limits
    versions: dict                   # the latest session's package versions
    machine: dict                    # the latest session's machine
    audit_error: str                 # the latest reason the audit did not run
    audit_skipped: dict              # {sample id: reason} of audits beyond the cell's limits
    n_rows: int                      # rows of samples.parquet
    outcomes: dict                   # {outcome: samples}
    compile_error: str               # message of the latest compile_error row
    compile_error_kind: str          # its kind (refused, timeout, oom, died, crash)
    aborted: str                     # the run time limit skipped samples: how many
    peak_rss_samples_mb: float       # the highest sample peak
    peak_rss_method: str             # how peak memory was measured (sessions joined)
    provenance: dict                 # {commits, dirty, hosts} of the sample rows
    git_commit: str                  # the one commit of every row (-dirty), null if several
    audit: dict                      # {steps, agree*: counts} of audit.parquet


RUN_KEYS = tuple(RunRecord.__annotations__)
#: keys every run.json holds (the cell's key); a file without them is not a gcdbench run.json
REQUIRED_RUN_KEYS = ("engine", "config", "dataset", "tokenizer")


def migrate_run(rec: dict, version: int) -> RunRecord:
    """A stored run.json of ``version`` as the current :class:`RunRecord` (version 0 has the keys of 1)."""
    if version == 0:
        rec = {"schema_version": SCHEMA_VERSION, **rec}
    return rec


def read_run(path) -> RunRecord:
    """``run.json`` at ``path`` (a file or a cell folder), version checked and migrated in memory. Raises
    OSError / ValueError for an unreadable file or one without :data:`REQUIRED_RUN_KEYS`,
    :class:`SchemaVersionError` (a ValueError) for an unknown version."""
    path = Path(path)
    if path.is_dir():
        path = path / "run.json"
    rec = json.loads(path.read_text())
    if not isinstance(rec, dict):
        raise ValueError(f"{path} is not a gcdbench run.json (not an object)")
    version = check_version(path, rec.get("schema_version"))   # first: another version may have other keys
    missing = [k for k in REQUIRED_RUN_KEYS if k not in rec]
    if missing:
        raise ValueError(f"{path} is not a gcdbench run.json (no {', '.join(missing)})")
    return migrate_run(rec, version)


def new_run(**keys) -> RunRecord:
    """A run.json record stamped with :data:`SCHEMA_VERSION`; a key not declared in :class:`RunRecord` is an
    error (declare it there first, with its one-line meaning)."""
    unknown = sorted(set(keys) - set(RUN_KEYS))
    if unknown:
        raise ValueError(f"run.json keys {unknown} are not declared in experiments/schema.py RunRecord")
    return RunRecord(schema_version=SCHEMA_VERSION, **keys)


class BenchFile(TypedDict, total=False):
    """A benchmark's file (``experiments/benchfile.py``: ``bench``, ``cliffs bench``/``shrink``, ``ptx_report``):
    what it measured, with the command, machine, versions and commit."""

    schema_version: int      # SCHEMA_VERSION of the writer (files stored before it: 0)
    command: str             # the command line that wrote the file
    when: str                # local time the file was written
    machine: dict            # host, CPU, core count, memory (experiments/provenance.py machine_info)
    git_commit: str          # the code's commit (result folders excluded from the dirty check)
    git_dirty: bool          # the work tree differed from that commit
    versions: dict           # package versions
    records: list            # one object per measurement (the benchmark's own keys)
    toolchain: dict          # ptx_report: the CUDA compiler's versions


BENCH_KEYS = tuple(BenchFile.__annotations__)


def new_bench(**keys) -> BenchFile:
    """A bench file's record stamped with :data:`SCHEMA_VERSION`; an undeclared key is an error."""
    unknown = sorted(set(keys) - set(BENCH_KEYS))
    if unknown:
        raise ValueError(f"bench file keys {unknown} are not declared in experiments/schema.py BenchFile")
    return BenchFile(schema_version=SCHEMA_VERSION, **keys)


def stored_path(path) -> Path:
    """``path``, or ``path.gz`` when only its gzipped copy is stored (``report.restore --gzip``)."""
    path = Path(path)
    gz = path.with_name(path.name + ".gz")
    return gz if not path.exists() and gz.exists() else path


def read_bench(path) -> BenchFile:
    """A bench file, its version checked (version 0: as stored before the schema, read as it is); ``x.json`` reads
    ``x.json.gz`` where only that is stored."""
    path = stored_path(path)
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
        raise ValueError(f"{path} is not a gcdbench bench file (no records list)")
    check_version(path, doc.get("schema_version"))
    return doc


# --------------------------------------------------------------------------------------------------------------
# documentation
# --------------------------------------------------------------------------------------------------------------
def markdown_table(table: str) -> str:
    """``table``'s columns as a markdown table (name, type, meaning), extras marked."""
    lines = ["| column | type | meaning |", "|---|---|---|"]
    for c in TABLES[table]:
        lines.append(f"| `{c.name}` | {_type_name(c.type)} | {c.doc} |")
    for c in EXTRAS[table]:
        only = " (batch mode only)" if c.name.startswith("batch") or c.name.endswith("single_mode") else ""
        lines.append(f"| `{c.name}` | {_type_name(c.type)} | {c.doc}{only} |")
    return "\n".join(lines)


def run_keys_markdown() -> str:
    """run.json's top-level keys with their meanings, from the comments of :class:`RunRecord`'s source."""
    import inspect

    docs = {}
    for line in inspect.getsource(RunRecord).splitlines():
        name, _, rest = line.strip().partition(":")
        if name in RUN_KEYS and "#" in rest:
            docs[name] = rest.split("#", 1)[1].strip()
    return "\n".join(["| key | meaning |", "|---|---|", *(f"| `{k}` | {docs.get(k, '')} |" for k in RUN_KEYS)])


def _keys_markdown(record) -> str:
    """A TypedDict's keys with the comment of each line of its source, as a markdown table."""
    import inspect

    docs = {}
    for line in inspect.getsource(record).splitlines():
        name, _, rest = line.strip().partition(":")
        if name in record.__annotations__ and "#" in rest:
            docs[name] = rest.split("#", 1)[1].strip()
    return "\n".join(["| key | meaning |", "|---|---|", *(f"| `{k}` | {docs.get(k, '')} |" for k in record.__annotations__)])


def result_files_markdown() -> str:
    """Every result file's columns or keys, as markdown (for the docs' "Result files" page)."""
    parts = []
    for t in TABLES:
        parts += [f"#### `{t}.parquet`", "", markdown_table(t), ""]
    parts += ["#### `run.json`", "", run_keys_markdown(), ""]
    parts += ["#### bench files (`--out` of `experiments.bench`, `cliffs`, `ptx_report`)", "", _keys_markdown(BenchFile), ""]
    return "\n".join(parts)


def _type_name(t: pa.DataType) -> str:
    return "string" if pa.types.is_large_string(t) else str(t)


README_BEGIN, README_END = "<!-- result-schema:begin -->\n", "<!-- result-schema:end -->"
#: the documentation page holding that section (tests/test_schema.py checks it agrees with this module)
DOCS_PAGE = "docs/reference/result-files.md"


def write_readme(path) -> None:
    """Replace the text between the result-schema marker comments of the page at ``path`` with
    :func:`result_files_markdown` (``python -m gcdbench.experiments.schema --readme``; a test checks they agree)."""
    from pathlib import Path

    text = Path(path).read_text()
    head, sep, rest = text.partition(README_BEGIN)
    _, sep2, tail = rest.partition(README_END)
    if not (sep and sep2):
        raise SystemExit(f"{path} has no {README_BEGIN.strip()} ... {README_END} section")
    Path(path).write_text(head + README_BEGIN + result_files_markdown() + README_END + tail)


if __name__ == "__main__":
    import argparse

    _p = argparse.ArgumentParser(prog="python -m gcdbench.experiments.schema",
                                 description="print every result file's declared columns as markdown")
    _p.add_argument("--readme", nargs="?", const=str(Path(__file__).resolve().parents[1] / DOCS_PAGE),
                    help=f"write them into this page's result-schema section (default: the project's {DOCS_PAGE})")
    _a = _p.parse_args()
    if _a.readme:
        write_readme(_a.readme)
    else:
        print(result_files_markdown(), end="")
