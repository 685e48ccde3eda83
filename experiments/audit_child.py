"""The audit of a cell in its own child process, under the cell's limits (issue 27).

The reference checker is exact and polynomial, but on a long sample or a deep grammar one audited step may still
take long and much memory; run in the runner's own process it could stall or exhaust the whole sweep. The parent
(:func:`audit_samples`) sends one sample at a time to a :class:`~gcdbench.parsers.limited.LimitedProcess` running
this module and waits under ``limits.sample_timeout_s`` and ``limits.memory_mb``; a sample that exceeds them is
recorded as "audit skipped: <reason>" and a fresh child takes the rest. Reference masks go through the on-disk
:class:`~gcdbench.experiments.audit.MaskCache`, so what a killed child computed is not lost.
"""
from __future__ import annotations

import sys
from typing import Callable

import numpy as np

from gcdbench.parsers.limited import Channel, LimitedProcess, die_with_parent, exit_description


def audit_samples(grammar, tokenizer_name: str, profile, cache_dir, jobs: list[tuple], timeout_s: float,
                  memory_mb: float, on_result: Callable[[str, list | None, str | None], None],
                  setup_timeout_s: float = 300.0) -> None:
    """Audit ``jobs`` (``(sample_id, text, ids, npz_path)``) in a limited child, each within ``timeout_s`` and
    ``memory_mb`` (the child's start, imports and reference set-up within ``setup_timeout_s``);
    ``on_result(sample_id, rows, skipped)`` gets the audit rows, or None and the reason the sample's audit was
    skipped (a set-up failure, such as a grammar the reference cannot read, skips every job with its reason)."""
    todo = list(jobs)
    while todo:
        proc = LimitedProcess([sys.executable, "-m", "gcdbench.experiments.audit_child"], channel=True)
        try:
            proc.send(("setup", grammar, tokenizer_name, profile, None if cache_dir is None else str(cache_dir)))
            ev = proc.wait(setup_timeout_s, memory_mb)
            if not (ev.kind == "message" and ev.value[0] == "ready"):
                reason = _reason(ev, setup_timeout_s, memory_mb, "setting up the reference")
                for sample_id, *_ in todo:
                    on_result(sample_id, None, reason)
                return
            while todo:
                sample_id, text, ids, npz = todo[0]
                proc.send(("audit", sample_id, text, list(ids), str(npz)))
                ev = proc.wait(timeout_s, memory_mb)
                todo.pop(0)
                if ev.kind == "message" and ev.value[0] == "rows":
                    on_result(sample_id, ev.value[2], None)
                    continue
                on_result(sample_id, None, _reason(ev, timeout_s, memory_mb, "auditing this sample"))
                break   # a fresh child for the rest
        finally:
            proc.kill()
            proc.close()


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
    from gcdbench.experiments.audit import Auditor
    from gcdbench.parsers.tokenizers import load_tokenizer

    auditor = tok = None
    while True:
        try:
            msg = chan.recv()
        except EOFError:
            return
        if msg[0] == "setup":
            _, grammar, tokenizer_name, profile, cache_dir = msg
            try:
                tok = load_tokenizer(tokenizer_name)
                auditor = Auditor(grammar, tok, profile, cache_dir=cache_dir)
            except Exception as err:   # noqa: BLE001 - re.error, Lark's errors, CompileError: one typed reason
                chan.send(("error", f"the reference checker cannot take the grammar ({type(err).__name__}: "
                                    f"{str(err)[:300]})"))
                return
            chan.send(("ready",))
        elif msg[0] == "audit":
            _, sample_id, text, ids, npz = msg
            with np.load(npz) as data:
                audited = {int(k): data[k] for k in data.files}
            chan.send(("rows", sample_id, auditor.check(text, ids, audited)))


if __name__ == "__main__":
    main()
