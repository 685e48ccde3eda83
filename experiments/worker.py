"""The child process of a run (``python -m gcdbench.experiments.worker``): compiles one engine once, runs one
untimed warm-up sample, then teacher-forces the samples the parent sends.

Messages (framed pickles over :class:`gcdbench.parsers.common.limited.Channel`), parent -> child:
``("init", engine, options, grammar, tokenizer, warmup_ids, steplog_path)``, then ``("sample", sample_id, token_ids,
audit_steps)``, ``("grammar", grammar)`` (a dataset of many grammars: compile the next one here, answered by
``compiled`` or ``compile_error``) or ``("stop",)``. Child -> parent: ``("attached",)`` once the StepLog is mapped (the parent then
unlinks its file), ``("progress", text)`` while compiling (the engine's log records), ``("compiled", info)`` or
``("compile_error", {"message", "kind"})``, ``("ready", warmup)``, then per sample ``("steps", rows)`` (only when a
sample outgrows the StepLog; rows in :data:`~gcdbench.experiments.rowlayout.WORKER_STEP` order) and ``("result",
dict)``. Batch mode runs in ``experiments/worker_batch.py`` (its own entry point, built on this module's compile
and memory helpers).

Each finished step goes to the shared :class:`~gcdbench.experiments.steplog.StepLog` at once, so that a sample
cut short by a limit or a crash keeps it. The steps are :func:`~gcdbench.experiments.steplog.step_along`'s (the
loop every command that drives an engine shares): only the fill call is inside the mask timer; the runner, not
the engine, checks the oracle token.
"""
from __future__ import annotations

import dataclasses
import gc
import logging
import os
import re
import resource
import time
import traceback

from gcdbench.experiments.jitwatch import WATCH, repair_numba_cache
from gcdbench.experiments.rowlayout import WORKER_STEP
from gcdbench.experiments.steplog import StepLog, step_along
from gcdbench.parsers.base import CompileError, Outcome, allocate_mask, mask_count

#: ``kind`` of a compile failure whose cause is the grammar itself (the same inputs give the same refusal): a
#: ``CompileError`` the engine raised. Time-outs (the runner's limit or the engine's own time budget, raised as
#: ``CompileTimeout``), running out of memory, a dead worker and any other exception are not.
DETERMINISTIC_COMPILE_FAILURES = ("refused",)
#: ``kind`` of a compile that ran out of time: the runner's ``limits.compile_timeout_s`` (``timeout``) or the
#: engine's own budget (``engine_timeout``). A resume compiles them again unless ``retry_compile_timeouts=false``.
COMPILE_TIMEOUTS = ("timeout", "engine_timeout")
#: how many damaged numba cache files one compile removes and compiles again before it gives up (a crash)
REPAIRS = 16


# --------------------------------------------------------------------------------------------------------------
# peak memory per phase
# --------------------------------------------------------------------------------------------------------------
def _vm_hwm_mb() -> float | None:
    """This process's resident high-water mark (``VmHWM`` of /proc/self/status), MB."""
    try:
        with open("/proc/self/status") as fh:
            m = re.search(r"VmHWM:\s+(\d+)\s+kB", fh.read())
        return int(m.group(1)) / 1024.0 if m else None
    except OSError:
        return None


def reset_peak_rss() -> bool:
    """Start a new phase: reset the resident high-water mark (Linux ``clear_refs`` 5). False where unsupported,
    and then the peak read afterwards is the process's lifetime peak."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def peak_rss_mb() -> float:
    """Resident high-water mark since the last :func:`reset_peak_rss` (or since start), MB."""
    hwm = _vm_hwm_mb()
    return hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# --------------------------------------------------------------------------------------------------------------
# one sample
# --------------------------------------------------------------------------------------------------------------
def teacher_force(engine, token_ids, eos_id, vocab_size, emit, audit_steps=(), token_bytes=None):
    """Run one sample (:func:`~gcdbench.experiments.steplog.step_along` over ``token_ids`` and EOS), calling
    ``emit(row)`` after each mask (a :data:`WORKER_STEP` row, commit_us 0) and ``emit.commit_time(us)`` after each
    commit.

    Returns (outcome, message, audited masks). Engine exceptions become typed outcomes (in ``step_along``).
    """
    mask = allocate_mask(vocab_size)
    audited = {}
    audit_steps = set(audit_steps)
    nbytes = 0
    last = 0     # the step of the last mask: where a refusal stands

    def on_mask(step, mask, allowed, mask_ns, jit):
        nonlocal last
        last = step
        if step in audit_steps or not allowed:   # a refused step is always audited (is the refusal documented?)
            audited[step] = mask.copy()
        # the row goes out before the commit, so a commit that kills the process still leaves the mask's row
        emit(WORKER_STEP.pack(step=step, prefix_bytes=nbytes, mask_us=mask_ns / 1000.0, commit_us=0.0,
                              n_allowed=mask_count(mask, vocab_size), oracle_allowed=allowed, jit=jit))

    def on_commit(step, tok, commit_ns):
        nonlocal nbytes
        emit.commit_time(commit_ns / 1000.0)
        if token_bytes is not None:
            nbytes += len(token_bytes[tok])

    outcome, message = step_along(engine, list(token_ids) + [eos_id], mask, on_mask, on_commit)
    if outcome in (Outcome.REJECTED, Outcome.NO_EOS) and token_bytes is not None:
        message += where_in_text(token_ids, token_bytes, last)
    return outcome, message, audited


def where_in_text(token_ids, token_bytes, step: int, before: int = 32) -> str:
    """Where in the sample's text the step ``step`` stands, for a refusal's message: its byte offset, the bytes
    before it and the token it refused (EOS past the last token), so that a user sees what the grammar did not
    take without decoding the sample by hand."""
    done = b"".join(token_bytes[t] for t in token_ids[:step])
    nxt = token_bytes[token_ids[step]] if step < len(token_ids) else b"<EOS>"
    return f" (at byte {len(done)} of the sample: {done[-before:]!r} then {nxt!r})"


class _Sender:
    """Stores each finished step in the shared StepLog (outside the timers), so that a sample cut short by
    a time limit, a crash or an exit keeps every step it finished."""

    def __init__(self, chan, log: StepLog):
        self.chan, self.log = chan, log

    def __call__(self, row):
        if self.log.count == self.log.capacity:
            self.chan.send(("steps", self.log.raw_rows()))
            self.log.reset()
        self.log.append(row)

    def commit_time(self, us: float):
        self.log.set_commit_us(us)


_MASK_US = WORKER_STEP.index["mask_us"]


class _Sink:
    """Keeps the warm-up sample's mask times (never stored as rows)."""

    def __init__(self):
        self.mask_us: list[float] = []

    def __call__(self, row):
        self.mask_us.append(row[_MASK_US])

    def commit_time(self, us: float):
        pass


class _Progress(logging.Handler):
    """Forwards the engine's log records (``gcdbench.*`` loggers, INFO and up) to the parent while it compiles."""

    def __init__(self, chan):
        super().__init__(logging.INFO)
        self.chan = chan

    def emit(self, record):
        try:
            self.chan.send(("progress", record.getMessage()))
        except Exception:   # noqa: BLE001 - progress is best effort
            pass


def settle_heap() -> None:
    """After a compile, outside every timer: collect the garbage, then move everything the process holds (the
    tokenizer, the compiled engine, earlier grammars of a many-grammar cell) out of the cycle collector's reach
    (``gc.freeze``), so that a full collection triggered inside a timed mask walks only what the samples allocate.
    Without it, a worker that had compiled hundreds of MaskBench schemas showed single masks of 0.1-0.2 s."""
    gc.collect()
    gc.freeze()


def compile_engine(chan, engine_name, engine_opts, grammar, tokenizer_name, prepare=None):
    """(engine, tokenizer) after sending ("compiled", info), or None after sending ("compile_error", ...).
    ``prepare(engine, tokenizer) -> dict`` (batch mode: the sequences) runs after the timed compile, before
    ``compiled``; what it returns joins the info, and an exception in it is a compile failure of kind ``crash``."""
    from gcdbench.parsers.base import CompileTimeout
    from gcdbench.parsers.registry import create_engine
    from gcdbench.parsers.tokenizers import load_tokenizer

    log = logging.getLogger("gcdbench")
    repaired: list[str] = []
    handler = _Progress(chan)
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        tokenizer = load_tokenizer(tokenizer_name)
        jit0 = WATCH.snapshot()   # the engine's modules are imported in create_engine: their jit counts as init's
        t_import = time.perf_counter()
        engine = create_engine(engine_name, **engine_opts)
        import_s = time.perf_counter() - t_import
        if grammar.refusal is not None and not engine.reads_json_schema:
            raise CompileError(f"the harness has no grammar for {grammar.name}: {grammar.refusal}")
        t0 = time.perf_counter()
        for attempt in range(REPAIRS + 1):
            try:
                engine.compile(grammar, tokenizer)
                break
            except Exception as err:   # noqa: BLE001 - a damaged numba cache file: removed, then compiled again
                fixed = repair_numba_cache(err) if attempt < REPAIRS else None
                if fixed is None:
                    raise
                log.warning(fixed)
                repaired.append(fixed)
                engine = create_engine(engine_name, **engine_opts)
        init_s = time.perf_counter() - t0
        jit_compile = WATCH.since(jit0)
    except CompileTimeout as err:
        chan.send(("compile_error", {"message": str(err), "kind": "engine_timeout"}))
        return None
    except CompileError as err:
        chan.send(("compile_error", {"message": str(err), "kind": "refused"}))
        return None
    except Exception:   # noqa: BLE001 - any other failure is the engine's crash, reported with its traceback
        chan.send(("compile_error", {"message": "engine crashed while compiling:\n" + traceback.format_exc(limit=8),
                                     "kind": "crash"}))
        return None
    finally:
        log.removeHandler(handler)
    extra = {}
    if prepare is not None:
        try:
            extra = prepare(engine, tokenizer)
        except Exception:   # noqa: BLE001 - e.g. an engine's fork() that raises: the batch cannot run
            chan.send(("compile_error", {"message": "the engine compiled, but making the batch's sequences failed:\n"
                                         + traceback.format_exc(limit=8), "kind": "crash"}))
            return None
    settle_heap()
    # the profile of the compiled engine: it may depend on the grammar (Pre3's front end, chosen per grammar)
    chan.send(("compiled", {"init_s": init_s, "import_s": import_s, "jit_compile": jit_compile,
                            **({"numba_cache_repaired": repaired} if repaired else {}), "version": engine.version(),
                            "engine_info": engine.info(),
                            "profile": dataclasses.asdict(engine.profile()), "peak_rss_compile_mb": peak_rss_mb(),
                            **extra}))
    return engine, tokenizer


def _warm_up(engine, tokenizer, ids) -> dict:
    """One untimed pass over a whole sample (masks and commits), so that JIT compilation, lazily built tables
    and first-touch page faults on every path a sample takes are not charged to the timed samples. Its first
    mask (cold, at the empty prefix) gives the time to first mask."""
    reset = reset_peak_rss()
    sink = _Sink()
    jit0 = WATCH.snapshot()
    t0 = time.perf_counter()
    outcome, message, _ = teacher_force(engine, ids, tokenizer.eos_id, tokenizer.vocab_size, sink, (),
                                        tokenizer.token_bytes)
    return {"warmup_s": time.perf_counter() - t0, "jit_warmup": WATCH.since(jit0),
            "first_mask_us": sink.mask_us[0] if sink.mask_us else None,
            "warmup_masks": len(sink.mask_us), "warmup_max_mask_us": max(sink.mask_us, default=None),
            "warmup_outcome": outcome.value, "warmup_message": message,
            "peak_rss_warmup_mb": peak_rss_mb(), "peak_rss_method": "vmhwm_reset" if reset else "lifetime"}


def main(serve=None) -> None:
    """Entry point of the child process; ``serve(chan, init_message)`` runs it (batch mode: ``worker_batch``'s)."""
    import signal

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    WATCH.install()   # before any engine is imported: every numba load and compile from here on is seen
    from gcdbench.parsers.common.limited import Channel, die_with_parent

    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the parent's to handle (it kills this process)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # so is a scheduler's SIGTERM to every process of a SLURM job
    chan = Channel.from_env()
    try:
        (serve or _serve)(chan, chan.recv())
    except (EOFError, BrokenPipeError, ConnectionResetError):
        os._exit(0)   # the parent is gone or stopped listening: nothing to report to


def _serve(chan, msg) -> None:
    _, engine_name, engine_opts, grammar, tokenizer_name, warmup_ids, log_path = msg
    log = StepLog(log_path)
    chan.send(("attached",))
    got = compile_engine(chan, engine_name, engine_opts, grammar, tokenizer_name)
    if got is None:
        return
    engine, tokenizer = got
    warm = _warm_up(engine, tokenizer, warmup_ids) if warmup_ids is not None else {}
    chan.send(("ready", warm))
    sender = _Sender(chan, log)
    while True:
        msg = chan.recv()
        if msg[0] == "stop":
            return
        if msg[0] == "grammar":   # a dataset of many grammars: the next group's, compiled in this process
            if engine is not None:
                engine.close()
            reset_peak_rss()
            got = compile_engine(chan, engine_name, engine_opts, msg[1], tokenizer_name)
            engine = got[0] if got is not None else None
            continue
        _, sample_id, token_ids, audit_steps = msg
        reset = reset_peak_rss()
        t0 = time.perf_counter()
        outcome, message, audited = teacher_force(
            engine, token_ids, tokenizer.eos_id, tokenizer.vocab_size, sender, audit_steps, tokenizer.token_bytes
        )
        chan.send(("result", {
            "sample_id": sample_id, "outcome": outcome.value, "message": message, "audited": audited,
            "wall_s": time.perf_counter() - t0, "peak_rss_mb": peak_rss_mb(),
            "peak_rss_method": "vmhwm_reset" if reset else "lifetime",
        }))


if __name__ == "__main__":
    main()
