"""A toy gcdbench plug-in: the reference checker under another name, with an option of its own, and a dataset of
lowercase words. Nothing in gcdbench names either; their entry points (pyproject.toml) make them
``engine=toy`` and ``dataset=toy_words``."""
from __future__ import annotations

from dataclasses import dataclass

from gcdbench.datasets.base import Dataset, Sample
from gcdbench.datasets.registry import loader
from gcdbench.parsers.base import GrammarSpec, option
from gcdbench.parsers.reference import ReferenceEngine

WORDS = 'start: WORD (" " WORD)*\nWORD: /[a-z]+/\n'


@dataclass
class ToyOptions:
    flavour: str = option("plain", "what info() reports", choices=("plain", "spicy"))


class ToyEngine(ReferenceEngine):
    """The reference checker, named ``toy``."""

    name = "toy"
    Options = ToyOptions

    def version(self) -> str:
        return "gcdbench-toy-0.1.0"

    @classmethod
    def complexity(cls, ambiguous: bool = False) -> str:
        return "O(toy)"

    def info(self) -> dict:
        return {"flavour": self.opts["flavour"]}


@loader(count=(3, "how many sentences"))
def toy_words(name, dcfg, data_root, n, seed) -> Dataset:
    count = int(dcfg["count"])
    samples = [Sample(f"toy-{i}", " ".join(["ab", "cd", "efg"][: i % 3 + 1])) for i in range(count)]
    return Dataset(name="toy_words", grammar=GrammarSpec("toy_words", WORDS), samples=samples[:n] if n else samples,
                   meta={"source": "gcdbench_toy"})
