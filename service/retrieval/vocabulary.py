"""An index version's vocabulary: in how many passages each word occurs (title and text).

"Not covered" reads from it how rare the rarest word of a question is in the documentation: a question about a
product the documentation does not describe often names something no passage mentions ("ksh", "TortoiseHg";
``benchmarks/probes/unseen_terms.py``: 21% of faq6's named neighbouring-product questions hold a word no passage
holds, 1.6% of its in-scope ones). ``fedqa index build`` stores it with the version (:data:`VOCABULARY_FILE`, a
gzipped ``word<TAB>passages`` list per product); an older version's (or one stored before it counted by product) is
counted from its passages when the pipeline loads. A caller limited to some products reads the counts of those products
only (:meth:`Vocabulary.within`): the counts of the others would tell it which words their documentation holds.
Words are :func:`service.text.terms` of 3 or more characters (shorter ones are names of nothing in particular),
counted by their English stem (PyStemmer's Snowball stemmer, as the lexical index stems): a question's "clogging" is
the documentation's "clogged", so a user's inflection of a word the manual holds does not read as a word it never
uses (``benchmarks/probes/unseen_terms.py --stems``). A snake_case identifier as written (``least_conn``,
``masquerade_as``: :func:`identifiers`) is counted whole beside its parts: a question naming another product's setting
splits into words the documentation holds ("least", "conn"), while the setting itself is in no passage. A file stored
before words were stemmed, or before identifiers were counted, is counted again. A question's everyday English word
that no passage holds (:func:`everyday_words`: "come", "server") is left out of both measures: on a few pages most of a
user's words are in no passage, and only a name the documentation never uses says it does not cover the question.
It also weighs how much of a question the passage placed first leaves unsaid (:meth:`Vocabulary.uncovered`): a
question about a neighbouring product ("Does sed issue an exit code?") often finds a passage on the topic that never
names the product it asks about, while a question the documentation answers shares its specific words with it.
"""

from __future__ import annotations

import gzip
import logging
import math
import threading
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import regex

from service.retrieval.passage import Passage
from service.text import english_stemmer, terms

log = logging.getLogger("fedqa.store")

VOCABULARY_FILE = "vocabulary.tsv.gz"
MIN_CHARS = 3
_PRODUCT = "#product"  # a product's section in VOCABULARY_FILE
_FORM = "#form\tstem+snake"  # the first line of a file that counts stems and snake_case names by product (older: counted again)
_IDENTIFIER = regex.compile(r"(?<![@\p{L}\p{N}_.-])[\p{L}\p{N}]+(?:[-_.][\p{L}\p{N}]+)+")
_LETTER = regex.compile(r"\p{L}")
_local = threading.local()


@lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """``word``'s English stem (one PyStemmer stemmer per thread: it is not thread-safe)."""
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = english_stemmer()
    return str(stemmer.stemWord(word))


def passage_terms(text: str) -> set[str]:
    """The stems of the words of ``text`` that the vocabulary counts, and its snake_case names (:func:`identifiers`)."""
    return {stem(t) for t in terms(text) if len(t) >= MIN_CHARS} | identifiers(text)


def identifiers(text: str, join: str = "_") -> set[str]:
    """The snake_case identifiers of ``text``, case-folded: runs of letters and digits joined by ``-``, ``_`` or ``.``,
    at least one ``join`` among them, holding a letter (``least_conn``, ``masquerade_as``, ``mod_proxy_balancer``). Names
    joined by dots alone are not counted (``sendmail.mc``, ``socket.ph``, ``me@box.localdomain``): users quote their own
    files, hosts and error messages, which no manual spells (``benchmarks/probes/identifier_terms.py``, which counts
    them with ``join="."``: that cost faq6's in-scope questions what it found in manuals_dev's neighbours)."""
    found = _IDENTIFIER.findall(unicodedata.normalize("NFC", text).casefold()) if join in text else ()
    return {t for t in found if len(t) >= MIN_CHARS and _LETTER.search(t) and join in t}


def _words(texts: Sequence[str]) -> set[str]:
    """The counted words of all of ``texts``."""
    return set().union(*(passage_terms(t) for t in texts))


@lru_cache(maxsize=1)
def everyday_words() -> frozenset[str]:
    """Everyday English words: the whole words of 3 or more letters in the shipped MiniLM's WordPiece vocabulary
    (``vocab.txt``, ~21,000: the words common enough in English Wikipedia and books to get a token of their own;
    "come", "server", "bread"; not "sourdough", "nginx", "matplotlib"). A word of a question that no passage holds
    says the documentation never names it only when it is not one of these (:meth:`Vocabulary.question_words`)."""
    from service.retrieval.encoder import packaged_minilm_path  # the encoder module is heavier than this one

    lines = (packaged_minilm_path() / "vocab.txt").read_text(encoding="utf-8").splitlines()
    return frozenset(w for w in lines if len(w) >= MIN_CHARS and w.isalpha() and w.isascii() and w.islower())


@dataclass(frozen=True)
class Vocabulary:
    """Passage counts per word of one index version (``products``: each product's own, when counted by product)."""

    counts: dict[str, int]
    passages: int
    products: dict[str, Vocabulary] = field(default_factory=dict)
    _scoped: dict[frozenset[str], Vocabulary] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def of(cls, passages: Iterable[Passage]) -> Vocabulary:
        """Count the words of ``passages`` (title and text), in all and per product."""
        counts: dict[str, Counter[str]] = {}
        sizes: Counter[str] = Counter()
        for p in passages:
            counts.setdefault(p.domain, Counter()).update(passage_terms(f"{p.title} {p.text}"))
            sizes[p.domain] += 1
        return cls.summed({d: cls(dict(c), sizes[d]) for d, c in counts.items()})

    @classmethod
    def summed(cls, products: dict[str, Vocabulary]) -> Vocabulary:
        """The vocabulary of all of ``products`` together (keeping each one's)."""
        total: Counter[str] = Counter()
        for v in products.values():
            total.update(v.counts)
        return cls(dict(total), sum(v.passages for v in products.values()), products)

    def within(self, allowed: frozenset[str] | None) -> Vocabulary:
        """The vocabulary of the ``allowed`` products only (None: every product); computed once per set."""
        if allowed is None or not self.products:
            return self
        scoped = self._scoped.get(allowed)
        if scoped is None:
            scoped = Vocabulary.summed({d: v for d, v in self.products.items() if d in allowed})
            self._scoped[allowed] = scoped
        return scoped

    def question_words(self, questions: Sequence[str]) -> set[str]:
        """The counted words of ``questions`` (:func:`passage_terms`) less the everyday English words
        (:func:`everyday_words`, matched as written) that no passage holds: on a few pages most of a user's words
        are in no passage ("Which themes come with Sitewright?": "come"), and those say nothing of what the
        documentation covers; a name it never uses ("TortoiseHg", "matplotlib", ``least_conn``) does."""
        common = everyday_words()
        words = identifiers(" ".join(questions))
        for t in terms(" ".join(questions)):
            if len(t) >= MIN_CHARS and ((s := stem(t)) in self.counts or t not in common):
                words.add(s)
        return words

    def rarity(self, questions: Sequence[str]) -> float:
        """1 / (1 + the passage count of the rarest of :meth:`question_words`): 1 when a name occurs in no passage,
        1/2 when in one, about 0 when every word is common (0 for a question with no such word)."""
        words = self.question_words(questions)
        if not words:
            return 0.0
        return 1.0 / (1.0 + min(self.counts.get(w, 0) for w in words))

    def specificity(self, word: str) -> float:
        """How specific ``word`` (a stem, :func:`passage_terms`) is to few passages: log((N + 1) / (df + 1)) /
        log(N + 1), 1 for a word no passage holds, near 0 for one every passage holds."""
        if self.passages <= 0:
            return 1.0
        return math.log((self.passages + 1) / (self.counts.get(word, 0) + 1)) / math.log(self.passages + 1)

    def uncovered(self, questions: Sequence[str], passages: Sequence[str]) -> float:
        """The share of :meth:`question_words` that none of ``passages`` holds, each word weighted by its
        :meth:`specificity` (0 when the passages hold every word, or for a question with no such word)."""
        weights = {w: self.specificity(w) for w in self.question_words(questions)}
        total = sum(weights.values())
        if total <= 0:
            return 0.0
        held = _words(passages)
        return sum(v for w, v in weights.items() if w not in held) / total

    def save(self, folder: Path) -> Path:
        """Write :data:`VOCABULARY_FILE` into ``folder``: a line saying it counts stems, then per product a
        ``#product<TAB>name<TAB>passages`` line and its stems (sorted) with their passage counts."""
        path = Path(folder) / VOCABULARY_FILE
        lines = [_FORM]
        for name, v in sorted(self.products.items()):
            lines.append(f"{_PRODUCT}\t{name}\t{v.passages}")
            lines.extend(f"{w}\t{c}" for w, c in sorted(v.counts.items()))
        with gzip.open(path, "wt", encoding="utf-8", compresslevel=6) as f:
            f.write("\n".join(lines) + "\n")
        return path

    @classmethod
    def load(cls, folder: Path) -> Vocabulary | None:
        """The vocabulary stored in ``folder``, or None when there is none or it was stored before it counted stems by
        product (then it is counted again from the passages)."""
        path = Path(folder) / VOCABULARY_FILE
        if not path.is_file():
            return None
        products: dict[str, Vocabulary] = {}
        counts: dict[str, int] = {}
        with gzip.open(path, "rt", encoding="utf-8") as f:
            if f.readline().rstrip("\n") != _FORM:
                log.info("%s was stored before it counted stems and snake_case names: counted again", path)
                return None
            for line in f:
                fields = line.rstrip("\n").split("\t")
                if fields[0] == _PRODUCT:
                    counts = {}
                    products[fields[1]] = cls(counts, int(fields[2]))
                elif fields[0]:
                    counts[fields[0]] = int(fields[1])
        return cls.summed(products)
