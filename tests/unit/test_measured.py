"""Issue 46: the ranked number is the operations' time as rai-timed took it, and it ranks only
when the outputs agree with the course's reference on the same inputs.

tests/fixtures/rai-timed/*.txt are what rai-timed wrote for the CPU stand-in
(tests/fixtures/ranked_op/op.c) with the same keys: the honest program (which is also the
course's reference), one whose inputs were cut to bfloat16, one that left out the last image of
the batch, and one whose thread wrote the outputs after the end mark."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from raiprotocol.models import MeasuredRun
from raiprotocol.spec import SpecError, parse_course_spec
from raiserver.grading.floor import floor_seconds
from raiserver.grading.measured import QUARANTINE, half_width, summarize
from raiserver.grading.opcheck import Mismatch, compare, relative_error
from raiworker.executors.docker.timed_result import parse

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "rai-timed"
SPEC = parse_course_spec("""
rai: {image: rai/ece408:cuda13}
commands: {build: [make m2 opt]}
ranked: {student_files: [new-forward.cu], timed: ./m2, reference: ./opt, repeats: 3, cpu_seconds: 10}
""")


def result(name: str):
    return parse((FIXTURES / f"{name}.txt").read_text())


def run(name: str, scale: float = 1.0, **kw) -> MeasuredRun:
    got, ref = result(name), result("honest")
    for op in got.ops:
        op.seconds = (op.seconds or 0) * scale
    return MeasuredRun(exit_code=got.exit_code or 0, wall_seconds=1.0, cpu_seconds=got.cpu_seconds, ops=got.ops, reference=ref.ops, **kw)


def test_rai_timed_result_is_read_as_written():
    r = result("honest")
    assert r.exit_code == 0 and r.problem is None and 0 < (r.cpu_seconds or 0) < 1
    assert [(op.inputs, op.outputs) for op in r.ops] == [(38032, 110592), (30048, 18432)]
    assert all(op.seconds and 0 < op.seconds < 1 for op in r.ops) and not any(op.changed for op in r.ops)
    assert len(r.ops[0].sketch) == 8 and len(r.ops[0].sample_at) == 16 and r.ops[0].norm2 and r.ops[0].norm2 > 0
    assert parse("exit 124\ncpu_usec 12\nbound 5000\nproblem the timed run was stopped at its bound of 5000 ms\n").bound_ms == 5000
    assert parse("op 1 2 3 garbage\nexit zz\n").ops == []  # what does not parse is left out
    over = parse("exit 124\ncpu_usec 3050000\ncpu_budget 3000\nproblem the timed run was stopped once its processes had used\n")
    assert over.cpu_budget_ms == 3000 and over.bound_ms is None and over.cpu_seconds == 3.05


@pytest.mark.parametrize("glob", ["../lib/libcudnn.so", "/usr/lib/*", "*", "lib cudnn", "$(reboot)"])
def test_the_course_forbids_file_names_never_paths_or_everything(glob):
    """ranked.forbid names files by a glob of their name: no path, no shell, not every file."""
    with pytest.raises(SpecError, match="ranked.forbid"):
        parse_course_spec(SPEC.model_dump_json().replace('"forbid":null', f'"forbid":["{glob}"]'))
    ok = parse_course_spec(SPEC.model_dump_json().replace('"forbid":null', '"forbid":["libcudnn*","libcublas*.so.?"]'))
    assert ok.ranked.forbid == ["libcudnn*", "libcublas*.so.?"]


def test_the_median_runs_total_ranks_and_the_spread_is_kept():
    m = summarize([run("honest", 1.1), run("honest"), run("honest", 0.9)], SPEC, 4, printed_op_time=None)
    total = sum(op.seconds or 0 for op in result("honest").ops)
    assert m.problem is None and m.op_time == pytest.approx(total) and m.runs[1] == m.op_time and m.course_version == 4
    assert m.spread == pytest.approx(0.2 * total) and m.accuracy == 1.0 and m.error == 0.0
    assert m.reference_time == pytest.approx(total) and m.ci == pytest.approx(half_width(m.runs))


def passes_run(scales: list[float]) -> MeasuredRun:
    """A timed run that did the course's two operations once per scale (a pass each), its reference too."""
    ops, ref = [], []
    for k in scales:
        for op in result("honest").ops:
            ops.append(op.model_copy(update={"seconds": (op.seconds or 0) * k}))
            ref.append(op)
    return MeasuredRun(exit_code=0, wall_seconds=1.0, cpu_seconds=0.1, ops=ops, reference=ref, passes=len(scales))


def test_every_pass_of_every_run_is_a_sample_and_the_runs_give_the_interval():
    """ranked.passes: a run does the operations several times over; the median pass ranks, a slow
    first pass (CUDA's first launch) or a slow pass here and there does not move it; the interval is that of
    the runs' medians (the passes of one run share its process: they are not independent)."""
    total = sum(op.seconds or 0 for op in result("honest").ops)
    runs = [passes_run([1.5, 1.0, 1.01]), passes_run([1.4, 0.99, 1.0]), passes_run([1.02, 1.0, 2.0])]
    m = summarize(runs, SPEC, 1, None)
    assert m.problem is None and m.passes == 3 and len(m.runs) == 9 and m.samples() == "9 passes (3 timed runs of 3)"
    assert m.op_time == pytest.approx(1.01 * total) and m.reference_time == pytest.approx(total)
    assert m.ci == pytest.approx(half_width([1.01 * total, 1.0 * total, 1.02 * total]), rel=1e-6)
    assert summarize([run("honest")] * 3, SPEC, 1, None).samples() == "3 timed runs"
    odd = passes_run([1.0, 1.0])
    odd.ops, odd.reference, odd.passes = odd.ops[:3], odd.reference[:3], 2  # 3 operations cannot be 2 passes
    assert summarize([odd], SPEC, 1, None).problem == "timed run 1 of 3: its 3 operations are not 2 passes of the course's"


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("precision", r"the outputs of operation 1 differ from the course's reference by \S+ \(relative; the course allows 0.0001\)"),
        ("partial", r"the outputs of operation 1 differ from the course's reference by \S+ \(relative; the course allows 0.0001\)"),
        ("thread", r"the outputs of operation 1 changed after its end mark: work went on after the clock stopped"),
    ],
)
def test_outputs_that_are_not_the_operations_do_not_rank(name, why):
    import re

    m = summarize([run(name)] * 3, SPEC, 1, None)
    assert m.op_time is None and m.problem and re.fullmatch(f"timed run 1 of 3: {why}", m.problem), m.problem


def test_the_error_estimate_separates_reordered_fp32_from_lower_precision():
    honest, precision, partial = (result(n).ops[0] for n in ("honest", "precision", "partial"))
    assert relative_error(honest, honest) == 0
    assert 3e-4 < relative_error(precision, honest) < 3e-2  # bfloat16 inputs: ~1e-3
    assert relative_error(partial, honest) > 1e-2  # one image of 24 missing
    wobble = honest.model_copy(deep=True)  # fp32 in another order: ~1e-7 relative
    wobble.sketch = [(v or 0) * (1 + 1e-7) for v in wobble.sketch]
    wobble.sample_values = [(v or 0) * (1 + 1e-7) for v in wobble.sample_values]
    assert relative_error(wobble, honest) < 1e-5
    nan = honest.model_copy(deep=True)
    nan.sketch[0] = None
    assert math.isinf(relative_error(nan, honest))


def test_the_operations_must_be_the_references():
    ops = result("honest").ops
    with pytest.raises(Mismatch, match="it timed 1 operation; the course's reference times 2"):
        compare(ops[:1], ops, 1e-4)
    small = [ops[0].model_copy(update={"outputs": 5}), ops[1]]
    with pytest.raises(Mismatch, match="operation 1 has 38032 inputs and 5 outputs; the course's has 38032 and 110592"):
        compare(small, ops, 1e-4)
    with pytest.raises(Mismatch, match="operation 2 never reached its end mark"):
        compare([ops[0], ops[1].model_copy(update={"seconds": None})], ops, 1e-4)


def test_a_failed_reference_cpu_over_budget_or_no_operation_does_not_rank():
    m = summarize([run("honest", reference_problem="the course's reference failed: it exited with status 2")] * 3, SPEC, 1, None)
    assert m.problem == "timed run 1 of 3: the course's reference failed: it exited with status 2"
    over = run("honest")
    over.cpu_seconds = 59.1
    assert summarize([over] * 3, SPEC, 1, None).problem == "59.1 s of CPU time in timed run 1 of 3 (the course allows 10 s)"
    none = run("honest")
    none.ops = []
    assert summarize([none], SPEC, 1, None).problem == "timed run 1 of 3 timed no operation (the course's harness marks each one: rai_op.h)"
    assert summarize([run("honest", problem="it was stopped at its bound of 5 s")], SPEC, 1, None).problem == (
        "timed run 1 of 3: it was stopped at its bound of 5 s"
    )


def test_old_measures_rank_nothing_and_say_so():
    old = parse_course_spec(SPEC.model_dump_json().replace('"measure":"op"', '"measure":"kernels"'))
    m = summarize([run("honest")], old, 3, None)
    assert m.problem and "is timed with measure: kernels, which no longer ranks" in m.problem


def test_the_physics_floor_quarantines_a_time_no_card_can_reach():
    """2.10e10 FLOP at 10,000 images on an H100: a run of microseconds is below the floor."""
    gpu = parse_course_spec(SPEC.model_dump_json().replace('"flops":null', '"flops":2.1e10'))
    assert floor_seconds(gpu.ranked, "NVIDIA H100 80GB HBM3") == pytest.approx(2.1e10 / 495e12)
    assert floor_seconds(gpu.ranked, "a card nobody knows") is None
    fast = run("honest", 1e-6)  # ~40 ns of "work"
    m = summarize([fast] * 3, gpu, 1, None, gpu_name="NVIDIA H100 80GB HBM3")
    assert m.problem and "below the physics floor of" in m.problem and QUARANTINE in m.flags
    assert summarize([run("honest")] * 3, gpu, 1, None, gpu_name="NVIDIA H100 80GB HBM3").problem is None


def test_printed_numbers_never_rank_and_a_disagreement_is_flagged():
    m = summarize([run("honest")] * 3, SPEC, 1, printed_op_time=0.000001)
    assert m.op_time and m.op_time > 0.001 and m.printed_op_time == 0.000001
    assert any(f.startswith("the program printed an op time of 1e-06 s") for f in m.flags)


def test_staff_list_the_runs_below_the_floor(db):
    """The quarantine list: ranked runs flagged below the physics floor, newest first; others not."""
    from helpers.rows import add_job, add_user

    from raiserver.config import Settings
    from raiserver.grading.leaderboard import quarantined
    from raiserver.store.db import utcnow

    alice = add_user(db, "alice")
    gpu = parse_course_spec(SPEC.model_dump_json().replace('"flops":null', '"flops":2.1e10'))
    below = summarize([run("honest", 1e-6)] * 3, gpu, 1, None, gpu_name="NVIDIA H100 80GB HBM3")
    fine = summarize([run("honest")] * 3, gpu, 1, None, gpu_name="NVIDIA H100 80GB HBM3")
    jobs = []
    for m, kind in ((below, "final"), (fine, "final"), (below, "dev")):
        job = add_job(db, alice, kind=kind)
        job.results, job.finished_at = {"measured": m.model_dump()}, utcnow()
        jobs.append(job)
    db.commit()
    listed = quarantined(db, Settings())
    assert [q["job_id"] for q in listed] == [jobs[0].id] and "below the physics floor" in listed[0]["why"]


# nsys stats --report cuda_gpu_kern_sum's table, the form parse_kernels reads (tests/unit/test_results.py)
KERNEL_TABLE = [
    " Time (%)  Total Time (ns)  Instances  Avg (ns)  Med (ns)  Min (ns)  Max (ns)  StdDev (ns)  Name",
    " --------  ---------------  ---------  --------  --------  --------  --------  -----------  ----",
    "    100.0         {ns}          2   1000000   1000000   1000000   1000000            0  conv_forward_kernel(const float *)",
    "",
]


@pytest.mark.parametrize("kernel_ms, flagged", [(5.0, False), (500.0, True)])
def test_the_profiled_runs_kernels_are_feedback_and_a_cross_check_never_the_number(kernel_ms, flagged):
    """A course's profiled run (ranked.profile): its kernel table is kept for the student; a kernel
    total the measured operations cannot contain is flagged for staff; the ranked number is rai-timed's."""
    from raiserver.grading.results import parse_kernels

    kernels = parse_kernels(line.replace("{ns}", str(int(kernel_ms * 1e6))) for line in KERNEL_TABLE)
    assert [k.ms for k in kernels] == [kernel_ms]
    plain = summarize([run("honest") for _ in range(3)], SPEC, 1, None)
    m = summarize([run("honest") for _ in range(3)], SPEC, 1, None, kernels=kernels)
    assert m.op_time == plain.op_time and m.kernels == kernels and (m.problem is None)
    said = [f for f in m.flags if f.startswith("the profiled run's kernels took")]
    assert bool(said) == flagged, m.flags
    assert not flagged or "more than the operations' measured" in said[0]


def test_how_each_operation_got_its_inputs_is_recorded():
    """Review F2: a run may prepare with "P" (it reads the inputs from rai-timed's memory, only
    slower since F1) or "Q" (rai-timed copies them in after its clock started); the op line says
    which, and staff see it in the measurement. A result from before the mark says nothing."""
    text = (FIXTURES / "honest.txt").read_text()
    marked = {k: parse("\n".join(f"{ln} via {k}" if ln.startswith("op ") else ln for ln in text.splitlines())) for k in "PQ"}
    assert [op.copied_in for op in marked["Q"].ops] == [True, True] and [op.copied_in for op in marked["P"].ops] == [False, False]
    assert [op.copied_in for op in result("honest").ops] == [None, None]
    assert marked["Q"].ops[0].sketch == result("honest").ops[0].sketch  # the mark is read after the checks, not into them

    def measured(*kinds: str):
        runs = [run("honest") for _ in kinds]
        for r, k in zip(runs, kinds, strict=True):
            r.ops = [op.model_copy(update={"copied_in": None if k == "-" else k == "Q"}) for op in r.ops]
        return summarize(runs, SPEC, 4, printed_op_time=None)

    assert measured("Q", "Q", "Q").inputs_copied_in is True
    assert measured("Q", "P", "Q").inputs_copied_in is False
    assert measured("Q", "-", "Q").inputs_copied_in is None and measured("-", "P", "Q").inputs_copied_in is False
    assert measured("P", "P", "P").problem is None  # allowed: it ranks


def test_staff_see_a_gpu_that_slowed_down_or_was_used_by_another_process():
    """Review F3: a run during which the GPU slowed itself down stands, flagged; so does one around
    which a process other than the run's (another job's, the operator's) used the GPU."""
    quiet = {"sm_mhz": 1980, "throttle": []}
    runs = [run("honest", gpu={"before": quiet, "after": quiet}) for _ in range(3)]
    runs[1].gpu = {"before": quiet, "after": quiet | {"throttle": ["hardware thermal slowdown"]}}
    runs[2].gpu = {"before": quiet | {"others": 2}, "after": quiet}
    m = summarize(runs, SPEC, 1, printed_op_time=None)
    assert m.problem is None and m.op_time  # they rank
    assert m.flags == [
        "the GPU slowed down during timed run 2 (hardware thermal slowdown)",
        "2 process(es) other than the run's used the GPU around timed run 3",
    ]
    assert summarize([run("honest", gpu={"before": quiet, "after": quiet}) for _ in range(3)], SPEC, 1, None).flags == []
