"""The audit of a cell in its own child process, under the cell's limits (issue 27).

The reference checker is exact and polynomial, but on a long sample or a deep grammar one audited step may still
take long and much memory; run in the runner's own process it could stall or exhaust the whole sweep. The parent
(:func:`audit_groups`) sends one sample at a time to a :class:`~gcdbench.parsers.common.limited.LimitedProcess` running
this module and waits under ``limits.sample_timeout_s`` and ``limits.memory_mb``; a sample that exceeds them is
recorded as "audit skipped: <reason>" and a fresh child takes the rest. Reference masks go through the on-disk
:class:`~gcdbench.experiments.audit.MaskCache`, so what a killed child computed is not lost.
"""
from __future__ import annotations

import sys
from typing import Callable

import numpy as np

from gcdbench.parsers.common.limited import Channel, LimitedProcess, die_with_parent, exit_description


def audit_samples(grammar, tokenizer_name: str, profile, cache_dir, jobs: list[tuple], timeout_s: float,
                  memory_mb: float, on_result: Callable[[str, list | None, str | None], None],
                  setup_timeout_s: float = 300.0) -> None:
    """Audit ``jobs`` (``(sample_id, text, ids, npz_path)``) of one grammar: :func:`audit_groups` with one group."""
    audit_groups([(grammar, profile, jobs)], tokenizer_name, cache_dir, timeout_s, memory_mb, on_result,
                 setup_timeout_s)


def audit_groups(groups: list[tuple], tokenizer_name: str, cache_dir, timeout_s: float, memory_mb: float,
                 on_result: Callable[[str, list | None, str | None], None], setup_timeout_s: float = 300.0) -> None:
    """Audit every ``(grammar, profile, jobs)`` group in one limited child, which sets the reference up for each
    grammar in turn (a dataset of many grammars, such as MaskBench's schemas, pays one process start and one
    tokenizer load per cell, not per grammar). Each job (``(sample_id, text, ids, npz_path)``) runs within
    ``timeout_s`` and ``memory_mb``, each grammar's set-up within ``setup_timeout_s``;
    ``on_result(sample_id, rows, skipped)`` gets the audit rows, or None and the reason the sample's audit was
    skipped (a grammar the reference cannot read skips that grammar's jobs with its reason, and the child goes
    on with the next). A child that times out, exceeds the memory or dies is replaced for what is left."""
    todo = [(grammar, profile, list(jobs)) for grammar, profile, jobs in groups if jobs]
    proc = None
    try:
        while todo:
            grammar, profile, jobs = todo[0]
            if proc is None:
                proc = LimitedProcess([sys.executable, "-m", "gcdbench.experiments.audit_child"], channel=True)
                proc.send(("tokenizer", tokenizer_name, None if cache_dir is None else str(cache_dir)))
            proc.send(("setup", grammar, profile))
            ev = proc.wait(setup_timeout_s, memory_mb)
            if not (ev.kind == "message" and ev.value[0] == "ready"):
                reason = _reason(ev, setup_timeout_s, memory_mb, "setting up the reference")
                for sample_id, *_ in jobs:
                    on_result(sample_id, None, reason)
                todo.pop(0)
                if not (ev.kind == "message" and ev.value[0] == "error"):   # the child is gone or stuck
                    proc = _close(proc)
                continue
            while jobs:
                sample_id, text, ids, npz = jobs.pop(0)
                proc.send(("audit", sample_id, text, list(ids), str(npz)))
                ev = proc.wait(timeout_s, memory_mb)
                if ev.kind == "message" and ev.value[0] == "rows":
                    on_result(sample_id, ev.value[2], None)
                    continue
                on_result(sample_id, None, _reason(ev, timeout_s, memory_mb, "auditing this sample"))
                proc = _close(proc)   # a fresh child for the rest
                break
            if not jobs:
                todo.pop(0)
    finally:
        if proc is not None:
            _close(proc)


def _close(proc) -> None:
    proc.kill()
    proc.close()
    return None


def _reason(ev, timeout_s, memory_mb, doing: str) -> str:
    if ev.kind == "timeout":
        return f"audit skipped: no result within {timeout_s:g} s {doing}"
    if ev.kind == "oom":
        return f"audit skipped: above {memory_mb:g} MB {doing} (limits.memory_mb)"
    if ev.kind == "message" and ev.value[0] == "error":
        return f"audit skipped: {ev.value[1]}"
    if ev.kind == "exit":
        return f"audit skipped: the audit process died {doing} ({exit_description(ev.value)})"
    return f"audit skipped: unexpected message {ev.value!r:.200}"


def main() -> None:
    die_with_parent()
    chan = Channel.from_env()
    from gcdbench.experiments.audit import Auditor, reference
    from gcdbench.parsers.tokenizers import load_tokenizer

    auditor = tok = cache_dir = tok_error = None
    while True:
        try:
            msg = chan.recv()
        except EOFError:
            return
        if msg[0] == "tokenizer":
            _, tokenizer_name, cache_dir = msg
            try:
                tok = load_tokenizer(tokenizer_name)
            except Exception as err:   # noqa: BLE001 - reported at the first set-up, which has a reply
                tok_error = f"the tokenizer {tokenizer_name!r} did not load ({type(err).__name__}: {str(err)[:300]})"
        elif msg[0] == "setup":
            _, grammar, profile = msg
            if tok_error is not None:
                chan.send(("error", tok_error))
                continue
            if auditor is not None and auditor.grammar != grammar:
                reference.cache_clear()   # one grammar at a time: the previous one's memo tables are freed
            try:
                auditor = Auditor(grammar, tok, profile, cache_dir=cache_dir)
            except Exception as err:   # noqa: BLE001 - re.error, Lark's errors, CompileError: one typed reason
                auditor = None
                chan.send(("error", f"the reference checker cannot take the grammar ({type(err).__name__}: "
                                    f"{str(err)[:300]})"))
                continue
            chan.send(("ready",))
        elif msg[0] == "audit":
            _, sample_id, text, ids, npz = msg
            with np.load(npz) as data:
                audited = {int(k): data[k] for k in data.files}
            chan.send(("rows", sample_id, auditor.check(text, ids, audited)))


if __name__ == "__main__":
    main()
