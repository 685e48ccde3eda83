"""Engines that misbehave on purpose, to test that the runner turns each failure into a typed outcome.

Each wraps the reference engine. The ``_Faulty`` ones misbehave when they commit a token whose bytes are ``z``,
so a sample containing ``z`` fails and the others pass; the ``*Compile*`` ones misbehave while compiling.
Selected as ``engine.name=tests.faulty_engines:<Class>`` (the worker imports them from the repository root).

Engines that wait for the test to kill them write ``<phase> <pid>`` to the file named by ``$GCDBENCH_TEST_MARKER``
first, so the test knows which process to kill and when.
"""
from __future__ import annotations

import os
import time

from gcdbench.parsers.base import CompileError, CompileTimeout, EngineError
from gcdbench.parsers.reference import ReferenceEngine


def mark(phase: str) -> None:
    """Tell the test (``$GCDBENCH_TEST_MARKER``) that this process reached ``phase``."""
    path = os.environ.get("GCDBENCH_TEST_MARKER")
    if path:
        with open(path, "a") as fh:
            fh.write(f"{phase} {os.getpid()}\n")


class _Faulty(ReferenceEngine):
    name = "faulty"

    def misbehave(self):
        raise NotImplementedError

    def commit(self, token_id: int) -> bool:
        if self.tokenizer.token_bytes[token_id] == b"z":
            self.misbehave()
        return super().commit(token_id)


class RaiseEngine(_Faulty):
    def misbehave(self):
        raise RuntimeError("deliberate failure on 'z'")


class ExitEngine(_Faulty):
    def misbehave(self):
        os._exit(3)


class HangEngine(_Faulty):
    def misbehave(self):
        time.sleep(3600)


class HogEngine(_Faulty):
    def misbehave(self):
        self.ballast = []
        for _ in range(64):   # up to 4 GiB, far above the test's 1.5 GB limit
            self.ballast.append(bytearray(64 << 20))
            self.ballast[-1][::4096] = b"x" * len(self.ballast[-1][::4096])   # touch every page
        time.sleep(120)


class ErrorStateEngine(_Faulty):
    def misbehave(self):
        raise EngineError("work limit reached (test)")


class MaskRaiseEngine(_Faulty):
    """Raises inside fill_mask once 'z' was committed."""

    def fill_mask(self, out):
        if getattr(self, "_armed", False):
            raise RuntimeError("deliberate failure inside a mask")
        return super().fill_mask(out)

    def reset(self):
        self._armed = False
        super().reset()

    def misbehave(self):
        self._armed = True


class WaitForKillEngine(_Faulty):
    """Sleeps inside a mask once the prefix ends in 'z' (after committing it), waiting to be killed."""

    def fill_mask(self, out):
        if getattr(self, "_armed", False):
            mark("mask")
            time.sleep(3600)
        return super().fill_mask(out)

    def misbehave(self):
        self._armed = True


class SlowEngine(ReferenceEngine):
    """Every mask takes 50 ms: a run lasts long enough for a test to kill it part-way."""

    def compile(self, grammar, tokenizer):
        mark("compile")
        super().compile(grammar, tokenizer)

    def fill_mask(self, out):
        time.sleep(0.05)
        return super().fill_mask(out)


class RefuseEngine(ReferenceEngine):
    def compile(self, grammar, tokenizer):
        mark("compile")
        raise CompileError("this engine refuses every grammar (test)")


class BudgetEngine(ReferenceEngine):
    """Gives up on a time budget of its own, the first time only (``$GCDBENCH_TEST_MARKER`` has no 'compile')."""

    def compile(self, grammar, tokenizer):
        path = os.environ.get("GCDBENCH_TEST_MARKER")
        first = not (path and os.path.exists(path) and "compile" in open(path).read())
        mark("compile")
        if first:
            raise CompileTimeout("construction exceeded its time budget (test)")
        super().compile(grammar, tokenizer)


class CrashCompileEngine(ReferenceEngine):
    def compile(self, grammar, tokenizer):
        raise RuntimeError("deliberate crash while compiling")


class HangCompileEngine(ReferenceEngine):
    """Compiles forever the first time (waiting to be killed or timed out), normally afterwards."""

    def compile(self, grammar, tokenizer):
        path = os.environ.get("GCDBENCH_TEST_MARKER")
        first = not (path and os.path.exists(path) and "compile" in open(path).read())
        mark("compile")
        if first:
            time.sleep(3600)
        super().compile(grammar, tokenizer)


class HogCompileEngine(ReferenceEngine):
    def compile(self, grammar, tokenizer):
        self.ballast = []
        for _ in range(64):
            self.ballast.append(bytearray(64 << 20))
            self.ballast[-1][::4096] = b"x" * len(self.ballast[-1][::4096])
        time.sleep(120)


class BurstCompileEngine(ReferenceEngine):
    """Touches 400 MB for a moment during compile and frees it before the runner's next memory poll (issue 27,
    item 3: a short phase over limits.memory_mb ended 'ok')."""
    def compile(self, grammar, tokenizer):
        burst = bytearray(400 << 20)
        burst[::4096] = b"x" * len(burst[::4096])
        del burst
        super().compile(grammar, tokenizer)


class ColdEngine(ReferenceEngine):
    """Its first mask after the first commit is slow once per process (a lazily built table): the warm-up sample
    must absorb it, so no timed mask pays for it."""

    def commit(self, token_id):
        ok = super().commit(token_id)
        if not getattr(self, "_warmed", False):
            self._cold_next = True
        return ok

    def fill_mask(self, out):
        if getattr(self, "_cold_next", False):
            self._cold_next = False
            self._warmed = True
            time.sleep(0.3)
        return super().fill_mask(out)


class ColderEngine(ColdEngine):
    """As ColdEngine, its one slow mask takes 3 s (a JIT on an empty cache): longer than a tight sample limit."""

    def fill_mask(self, out):
        if getattr(self, "_cold_next", False):
            time.sleep(2.7)
        return super().fill_mask(out)


class SlowStartEngine(ColderEngine):
    """As ColderEngine (a 3 s warm-up), and its compile takes 2 s (a first run on an empty cache)."""

    def compile(self, grammar, tokenizer):
        time.sleep(2.0)
        super().compile(grammar, tokenizer)


class ForkRaiseEngine(ReferenceEngine):
    """Its fork() raises (batch mode cannot make its sequences)."""

    def fork(self):
        raise TypeError("deliberate failure in fork")


class BatchRaiseEngine(ReferenceEngine):
    """Its batch call always raises; each sequence's own fill_mask works (a batch path that drifted)."""

    def fork(self):
        other = type(self)()
        other.checker, other.tokenizer = self.checker, self.tokenizer
        other.reset()
        return other

    def fill_masks(self, seqs, out):
        raise RuntimeError("deliberate failure of the batch call")


class CommitManyRaiseEngine(BatchRaiseEngine):
    """Its batch commit raises as a whole once a sequence commits 'z' (against commit_many's contract: one entry
    per sequence); its masks are fine."""

    def fill_masks(self, seqs, out):
        ReferenceEngine.fill_masks(self, seqs, out)

    def commit_many(self, seqs, tokens):
        if any(self.tokenizer.token_bytes[t] == b"z" for t in tokens):
            raise RuntimeError("deliberate failure of the batch commit")
        return super().commit_many(seqs, tokens)


class SlowGrammarEngine(ReferenceEngine):
    """Hangs while compiling a grammar named ``slow`` (a dataset of many grammars: one group's compile times out,
    the worker is replaced for the next group)."""

    def compile(self, grammar, tokenizer):
        if grammar.name == "slow":
            time.sleep(120)
        super().compile(grammar, tokenizer)


class LateJitEngine(_Faulty):
    """Compiles a jitted function inside a mask (the reference's mask, then a fresh numba function on a type it has
    not met): at the step after it commits the letter ``z``, as an engine whose later path meets a new signature."""

    def compile(self, grammar, tokenizer):
        import numba

        super().compile(grammar, tokenizer)
        self._late = numba.njit(lambda x: x + 1)   # no cache: compiled in this process at first use
        self._due = False

    def misbehave(self):
        self._due = True

    def fill_mask(self, out):
        super().fill_mask(out)
        if self._due:
            self._due = False
            self._late(1.5)


class CacheEnvEngine(ReferenceEngine):
    """The reference, reporting in ``info()`` the cache folders its worker was started with (``cold=true``)."""

    def info(self) -> dict:
        return {k: os.environ.get(k) for k in ("NUMBA_CACHE_DIR", "GCDBENCH_CACHE")}


import numba  # noqa: E402 - the numba-cache engines below only


@numba.njit(cache=True)
def cached_plus_one(x):
    """A function numba keeps in its on-disk cache (``$NUMBA_CACHE_DIR``): the damaged-cache tests cut its files."""
    return x + 1


class CachedJitEngine(ReferenceEngine):
    """The reference, plus a numba function from the on-disk cache loaded in init (``lazy``: in every mask, so the
    first mask loads it)."""

    lazy = False

    def compile(self, grammar, tokenizer):
        super().compile(grammar, tokenizer)
        if not self.lazy:
            cached_plus_one(1)

    def fill_mask(self, out):
        super().fill_mask(out)
        if self.lazy:
            cached_plus_one(1)


class LazyCachedJitEngine(CachedJitEngine):
    lazy = True
