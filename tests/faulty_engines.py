"""Engines that misbehave on purpose, to test that the runner turns each failure into a typed outcome.

Each wraps the reference engine and misbehaves when it commits a token whose bytes are ``z``, so a sample
containing ``z`` fails and the others pass. Selected as ``engine.name=tests.faulty_engines:<Class>``.
"""
from __future__ import annotations

import os
import time

from gcdbench.parsers.base import CompileError
from gcdbench.parsers.reference import ReferenceEngine


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


class RefuseEngine(ReferenceEngine):
    def compile(self, grammar, tokenizer):
        raise CompileError("this engine refuses every grammar (test)")
