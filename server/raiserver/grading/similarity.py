"""Pairwise code similarity (issue 36), made by copydetect: each team's code is tokenized with
pygments' C++ lexer (CUDA is C++ to it; names, strings and comments do not count), fingerprinted by
winnowing, the course's starter code taken out as boilerplate, and every pair compared. Pure: the
report's job (grading/similarityreport.py) reads the submissions and keeps the result.

A pair's score is the larger of its two shares (the part of one team's code found in the other's);
pairs that share no fingerprint are skipped before copydetect's comparison, which keeps 300 teams
(44,850 pairs) within minutes (bench/similarity.py measures it)."""

from __future__ import annotations

import heapq
import io
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from markupsafe import Markup

if TYPE_CHECKING:  # copydetect brings numpy and matplotlib: loaded when a report is made, not with every server process
    import numpy as np
    from copydetect import CodeFingerprint

NOISE, GUARANTEE = 25, 30  # copydetect's defaults: matches shorter than 25 tokens are noise, 30 are always found
WINDOW = GUARANTEE - NOISE + 1
LANGUAGE = "cpp"  # pygments' C++ lexer, for .cu and .cuh as well
TOP = 50  # pairs kept, with the code of their teams (at most 100 files of 128 KiB)

logging.getLogger("copydetect").setLevel(logging.ERROR)


@dataclass
class Doc:
    """One team's code: its latest submission's student files, one after the other."""

    team: str
    job_id: str
    code: str


@dataclass
class Pair:
    a: int  # index into the docs
    b: int
    score: float
    share_a: float
    share_b: float
    tokens: int
    slices_a: list[list[int]]  # [starts, ends] in the raw code
    slices_b: list[list[int]]


Progress = Callable[[str, int, int], None]  # phase, done, total


def boilerplate(starter: str) -> np.ndarray:
    """Every fingerprint of the starter code (window 1, as copydetect does for boilerplate)."""
    import numpy as np
    from copydetect.utils import filter_code, get_document_fingerprints

    if not starter.strip():
        return np.array([], dtype=np.int64)
    filtered, _ = filter_code(starter, "starter.cu", LANGUAGE)
    hashes, _ = get_document_fingerprints(filtered, NOISE, 1)
    return np.unique(np.array(sorted(hashes), dtype=np.int64))


def fingerprint(doc: Doc, starter_hashes: np.ndarray) -> CodeFingerprint:
    from copydetect import CodeFingerprint

    return CodeFingerprint(f"{doc.job_id}.cu", NOISE, WINDOW, boilerplate=starter_hashes, language=LANGUAGE, fp=io.StringIO(doc.code))


def compare(docs: list[Doc], starter: str, progress: Progress, top: int = TOP) -> list[Pair]:
    """The ``top`` most similar pairs, most similar first."""
    from copydetect import compare_files

    starter_hashes = boilerplate(starter)
    prints: list[CodeFingerprint] = []
    for i, doc in enumerate(docs):
        prints.append(fingerprint(doc, starter_hashes))
        progress("reading", i + 1, len(docs))
    n, done = len(prints), 0
    total = n * (n - 1) // 2
    best: list[tuple[float, int, int, Pair]] = []  # a heap of the best so far (score, a, b, pair)
    progress("comparing", 0, total)
    for i in range(n):
        for j in range(i + 1, n):
            if prints[i].hashes.isdisjoint(prints[j].hashes):
                continue
            tokens, (share_a, share_b), (sa, sb) = compare_files(prints[i], prints[j])
            score = float(max(share_a, share_b))
            if tokens <= 0 or score <= 0 or (len(best) >= top and score <= best[0][0]):  # nothing in common: no pair
                continue
            pair = Pair(
                i,
                j,
                score,
                float(share_a),
                float(share_b),
                int(tokens),
                [[int(v) for v in row] for row in sa],
                [[int(v) for v in row] for row in sb],
            )
            item = (score, -i, -j, pair)
            heapq.heappush(best, item) if len(best) < top else heapq.heapreplace(best, item)
        done += n - 1 - i
        progress("comparing", done, total)
    return [p for *_, p in sorted(best, key=lambda t: t[:3], reverse=True)]


def highlight(code: str, slices: list[list[int]]) -> Markup:
    """The code, HTML-escaped, with the matching regions in <mark> (copydetect's highlighter)."""
    if not slices or not slices[0]:
        return Markup.escape(code)
    import numpy as np
    from copydetect.utils import highlight_overlap

    marked, _ = highlight_overlap(code, np.array(slices), "<mark>", "</mark>", escape_html=True)
    return Markup(marked)
