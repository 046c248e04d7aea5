"""Issue 32: each timed run of a seeded course classifies the inputs in an order a secret seed
chooses. The server and the course's program (examples/ece408-conv/src/driver.cc) must shuffle to
the bit alike: the figures below are what the C++ printed for these seeds (10,000 inputs: the first
three, the last two and a rolling hash of the whole order)."""

from __future__ import annotations

from raiprotocol.inputs import run_seed, shuffled
from raiprotocol.models import MeasuredRun
from raiprotocol.spec import parse_course_spec
from raiserver.grading.measured import summarize

CPP = {4611686018427387903: (738, 6850, 5497, 6323, 1670, 12302394028731124648), 12345: (7078, 7366, 1930, 2484, 4944, 1759168427511779042)}


def test_the_server_shuffles_as_the_course_program_does():
    for seed, (a, b, c, y, z, digest) in CPP.items():
        order = shuffled(10000, seed)
        h = 0
        for v in order:
            h = (h * 1000003 + v) % (1 << 64)
        assert (order[0], order[1], order[2], order[9998], order[9999], h) == (a, b, c, y, z, digest)
        assert sorted(order) == list(range(10000))


def test_seeds_are_secret_distinct_per_run_and_found_again():
    seeds = [run_seed("server-secret", "J1", 1, r) for r in range(1, 6)]
    assert len(set(seeds)) == 5 and all(0 <= s < 2**63 for s in seeds)
    assert seeds == [run_seed("server-secret", "J1", 1, r) for r in range(1, 6)]  # the server finds them again
    assert seeds[0] != run_seed("another-secret", "J1", 1, 1) and seeds[0] != run_seed("server-secret", "J1", 2, 1)


def test_answers_in_the_original_order_fail_a_seeded_run():
    """A run that wrote the answers in the test set's own order (precomputed, or kept from a run
    with another seed) scores as a guess; the same answers in the seed's order score in full."""
    labels = [str(i % 10) for i in range(1000)]
    spec = parse_course_spec("""
rai: {image: rai/ece408:cuda13}
commands: {build: [make m2]}
ranked: {student_files: [new-forward.cu], timed: ./m2 1000, repeats: 2, measure: wall, seeded: true}
""")
    seeds = [run_seed("s", "J", 1, r) for r in (1, 2)]
    right = ["\n".join(labels[j] for j in shuffled(1000, seed)) + "\n" for seed in seeds]
    stale = "\n".join(labels) + "\n"
    text = "\n".join(labels) + "\n"
    good = summarize([MeasuredRun(exit_code=0, wall_seconds=1.0, predictions=p) for p in right], spec, 1, text, None, seeds)
    assert good.problem is None and good.accuracy == 1.0
    kept = summarize([MeasuredRun(exit_code=0, wall_seconds=1.0, predictions=p) for p in (right[0], right[0])], spec, 1, text, None, seeds)
    assert kept.accuracy < 0.3  # run 2 reused run 1's answers
    precomputed = summarize([MeasuredRun(exit_code=0, wall_seconds=1.0, predictions=stale)] * 2, spec, 1, text, None, seeds)
    assert precomputed.accuracy < 0.3
