"""Issue 36, part 3: the similarity report, on PostgreSQL, through the real client and Chromium.

Teams submit the ranked kind (the course names new-forward.cu and report.pdf); staff start a report
(`raiclient admin similarity final --starter new-forward.cu`, or the button on /similarity); the
server makes it in the background and the most similar pairs come back, the copy first, the untouched
starter never a match; the pair's page shows both files side by side with the matches highlighted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import ROOT, make_project
from helpers.ranked import IMAGE, IN_IMAGE, ensure_course_image, offer_course_image

pytestmark = pytest.mark.timeout(300)
SHOTS = Path("/tmp/shots36b")
STARTER = ROOT / "examples" / "ece408-conv" / "new-forward.cu"
COURSE = f"""rai:
  version: 0.2
  image: {IMAGE}
commands:
  build:
    - cp /src/new-forward.cu /build/
ranked:
  student_files: [new-forward.cu, report.pdf]
  timed: "true"
  reference: {IN_IMAGE}/ref
  repeats: 2
  tolerance: 0.5
"""
TILED = """
__global__ void tiled(const float *x, const float *k, float *y, int C, int H, int W, int K) {
  __shared__ float tile[16][16];
  int tx = threadIdx.x, ty = threadIdx.y, row = blockIdx.y * 16 + ty, col = blockIdx.x * 16 + tx;
  float acc = 0.0f;
  for (int c = 0; c < C; ++c) {
    tile[ty][tx] = x[(c * H + row) * W + col];
    __syncthreads();
    for (int p = 0; p < K; ++p) for (int q = 0; q < K; ++q) acc += tile[ty + p][tx + q] * k[(c * K + p) * K + q];
    __syncthreads();
  }
  if (row < H && col < W) y[row * W + col] = acc; // </pre><script>alert(1)</script>
}
"""
OWN = """
__constant__ float weights[4096];
__global__ void unrolled(const float *in, float *out, int n, int K) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float total = 0;
  #pragma unroll 4
  for (int j = 0; j < K * K; j += 1) { total = fmaf(in[i + j % K], weights[j], total); if (total > 1e9f) total = 1e9f; }
  out[i] = total * 0.5f + in[i] / (1.0f + (float)K);
}
"""


@pytest.fixture(scope="module")
def klass(pg_service, docker_engine, tmp_path_factory):
    """Five teams' 'final' submissions: sim-a's kernel, sim-b's disguised copy of it (and an earlier
    submission of its own, not its latest), sim-c's own kernel, sim-d and sim-e the untouched starter."""
    svc = pg_service
    tmp = tmp_path_factory.mktemp("sim")
    ensure_course_image(docker_engine, tmp / "image")
    offer_course_image(svc, docker_engine)
    (tmp / "final.yml").write_text(COURSE)
    res = svc.client("admin", "course", "install", "final", str(tmp / "final.yml"))
    assert res.returncode == 0, res.stdout + res.stderr
    starter = STARTER.read_text()
    copy = TILED.replace("acc", "mySum").replace("tile", "buffer").replace("row", "r").replace("    ", "  ")
    subs = [
        ("sim-b", starter + OWN.replace("total", "t")),
        ("sim-a", starter + TILED),
        ("sim-b", starter + "// mine\n" + copy),
        ("sim-c", starter + OWN),
        ("sim-d", starter),
        ("sim-e", starter),
    ]
    for i, (team, code) in enumerate(subs):
        who = f"{team}-{i}"
        profile = svc.add_user(who, team=team)
        proj = make_project(tmp / who, ["true"], files={"new-forward.cu": code, "report.pdf": "%PDF-1.4"})
        res = svc.client("submit", "-p", str(proj), "--kind", "final", "--detach", env={"RAI_PROFILE": str(profile)})
        assert res.returncode == 0, res.stdout + res.stderr
    return svc


def test_staff_start_a_report_follow_it_and_the_copy_comes_first(klass):
    svc = klass
    ta = svc.add_user("sim_ta", role="ta")
    student = svc.add_user("sim_student")
    res = svc.client("admin", "similarity", "final", "--starter", str(STARTER), env={"RAI_PROFILE": str(ta)}, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert re.search(r"Similarity report #\d+ for 'final' started \(new-forward.cu\)", res.stdout), res.stdout
    assert re.search(r"Similarity report #\d+ done in [\d.]+ s: 5 teams compared", res.stdout), res.stdout
    rows = [line.split("│") for line in res.stdout.splitlines() if line.startswith("│")][1:]  # below the header
    assert rows and [c.split()[0] for c in rows[0][2:4]] == ["sim-a", "sim-b"], res.stdout  # the copy, first
    first = " ".join(" ".join(c.split()) for c in rows[0][2:4])
    assert first.startswith("sim-a (sim-a-1) sim-b (sim-b-0,"), res.stdout  # its students named (issue 49)
    assert "/similarity/" in res.stdout and "/pairs/1" in res.stdout
    rid = int(re.search(r"#(\d+)", res.stdout).group(1))
    with svc.http(ta) as h:
        report = h.get(f"/api/v1/admin/similarity/{rid}").json()
    assert report["state"] == "done" and report["teams"] == 5 and report["done"] == report["total"] == 10, report
    pairs = {(p["a"], p["b"]): p for p in report["pairs"]}
    assert pairs[("sim-a", "sim-b")]["score"] > 0.8 and ("sim-d", "sim-e") not in pairs, pairs  # the starter is no match
    assert (pairs[("sim-a", "sim-b")]["a_members"], pairs[("sim-a", "sim-b")]["b_members"]) == (["sim-a-1"], ["sim-b-0", "sim-b-2"])
    assert all(p["tokens"] > 0 and p["score"] > 0 for p in report["pairs"]), report["pairs"]  # nothing in common: no pair
    with svc.http() as h:
        assert any(
            a["action"] == "similarity.start" and a["actor"] == "sim_ta" and a["detail"]["report"] == rid
            for a in h.get("/api/v1/admin/audit").json()
        )

    # without the starter, the two untouched copies of it are the same code
    res = svc.client("admin", "similarity", "final", env={"RAI_PROFILE": str(ta)}, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    again = int(re.search(r"#(\d+)", res.stdout).group(1))
    with svc.http(ta) as h:
        report = h.get(f"/api/v1/admin/similarity/{again}").json()
    assert {(p["a"], p["b"]): p["score"] for p in report["pairs"]}[("sim-d", "sim-e")] == 1.0

    # bad input: one line each, nothing started
    for who, args, line in [(ta, ["dev"], "'dev' has no course build file installed"), (student, ["final"], "staff only")]:
        res = svc.client("admin", "similarity", *args, env={"RAI_PROFILE": str(who)})
        assert res.returncode != 0 and line in res.stderr and len(res.stderr.strip().splitlines()) == 1, (res.stdout, res.stderr)
    # one report at a time: a second start while the first is queued is refused, naming it
    with svc.http(ta) as h:
        first = h.post("/api/v1/admin/similarity", json={"kind": "final"})
        second = h.post("/api/v1/admin/similarity", json={"kind": "final"})
        assert first.status_code == 202, first.text
        assert second.status_code == 409 and f"similarity report #{first.json()['id']} ('final') is" in second.json()["detail"]
        recent = h.get("/api/v1/admin/similarity").json()
    assert [r["id"] for r in recent][:2] == [first.json()["id"], again]  # the refused one left no row


def test_the_pages_start_a_report_and_show_a_pair_side_by_side(klass):
    from playwright.sync_api import sync_playwright
    from test_web import CHROMIUM, login

    svc = klass
    SHOTS.mkdir(parents=True, exist_ok=True)
    prof = svc.add_user("sim_prof", role="instructor")
    student = svc.add_user("sim_student2")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = login(b, svc, student)
        page.goto(f"{svc.url}/similarity")
        assert "this page is for staff" in page.inner_text("main")
        page.close()

        page = login(b, svc, prof)
        wait_idle(svc, prof)
        page.goto(f"{svc.url}/similarity")
        page.set_input_files("#start-form input[name=starter]", str(STARTER))
        page.screenshot(path=str(SHOTS / "similarity-start.png"), full_page=True)
        page.click("#start-form button")
        page.wait_for_url(re.compile(r".*/similarity/\d+$"))
        page.wait_for_selector("#pairs", timeout=60_000)  # the page refreshes itself until the report is done
        text = page.inner_text("main")
        assert "5 teams compared" in text and f"left out ({len(STARTER.read_bytes())} bytes)" in text, text
        first = page.locator("#pairs tbody tr").first.inner_text()
        assert "sim-a" in first and "sim-b" in first, first
        assert "sim-a-1" in first and "sim-b-0, sim-b-2" in first, first  # the students, not only the teams (issue 49)
        assert "sim-d\tsim-e" not in page.inner_text("#pairs")
        page.screenshot(path=str(SHOTS / "similarity-report.png"), full_page=True)
        page.click("#pairs tbody tr >> nth=0 >> text=side by side")
        page.wait_for_url(re.compile(r".*/pairs/1$"))
        for side in ("#side-1", "#side-2"):
            marks = page.locator(f"{side} mark")
            assert marks.count() >= 1 and "__syncthreads" in " ".join(marks.all_inner_texts())
            assert "conv_forward_kernel" not in " ".join(marks.all_inner_texts())  # the starter is not marked
        assert "<script>alert(1)</script>" in page.inner_text("#side-1")  # shown as text, not run
        heads = [" ".join(h.split()) for h in page.locator(".side-by-side h2").all_inner_texts()]
        assert heads[0].startswith("sim-a (sim-a-1)") and heads[1].startswith("sim-b (sim-b-0, sim-b-2)"), heads
        page.screenshot(path=str(SHOTS / "similarity-pair.png"), full_page=True)
        page.goto(f"{svc.url}/similarity")
        page.screenshot(path=str(SHOTS / "similarity-list.png"), full_page=True)
        page.close()
        b.close()


def wait_idle(svc, profile, timeout: float = 60) -> None:
    """No report queued or running (the first test's last one): the button's report can start."""
    import time

    deadline = time.monotonic() + timeout
    with svc.http(profile) as h:
        while time.monotonic() < deadline:
            if all(r["state"] in ("done", "failed") for r in h.get("/api/v1/admin/similarity").json()):
                return
            time.sleep(0.5)
    raise AssertionError("a similarity report did not end")


def seed_class(svc, teams: int) -> None:
    """``teams`` more teams' latest 'final' submissions, as the service stores them (a user, a job,
    the archive in storage), made by bench/similarity.py: a class too big to submit here."""
    import importlib.util

    from raiserver.store.db import Database
    from raiserver.store.storage import Storage

    spec = importlib.util.spec_from_file_location("bench_similarity", ROOT / "bench" / "similarity.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    docs, _ = bench.corpus(teams, 3, 2)
    db = Database(svc.env["DATABASE_URL"])
    bench.store_class(db, Storage(svc.data / "storage"), docs, prefix="big-")
    db.engine.dispose()


def test_a_bigger_class_shows_its_progress_and_the_server_keeps_answering(klass):
    """150 more teams (155 teams, 11,935 pairs in all): the client prints the progress as the report is made, its
    page shows it, and the server answers requests meanwhile (the report runs beside them)."""
    import time

    from playwright.sync_api import sync_playwright
    from test_web import CHROMIUM, login

    svc = klass
    seed_class(svc, 150)
    ta = svc.add_user("sim_ta_big", role="ta")
    wait_idle(svc, ta)
    proc = svc.popen_client("admin", "similarity", "final", "--starter", str(STARTER), "-n", "5", env={"RAI_PROFILE": str(ta)})
    slowest = 0.0
    with svc.http(ta) as h, sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = login(b, svc, ta)
        deadline = time.monotonic() + 60
        running = None
        while running is None and time.monotonic() < deadline:
            running = next((r for r in h.get("/api/v1/admin/similarity").json() if r["state"] in ("queued", "running")), None)
        assert running is not None, "the report did not start"
        page.goto(f"{svc.url}/similarity/{running['id']}")
        page.wait_for_selector("#progress progress", timeout=60_000)  # the page refreshes itself as it goes
        assert re.search(r"running, (reading|comparing) \d+/\d+ (teams|pairs)", page.inner_text("#progress")), page.inner_text("#progress")
        page.screenshot(path=str(SHOTS / "similarity-progress.png"), full_page=True)
        while proc.poll() is None and time.monotonic() < deadline + 120:
            t0 = time.monotonic()
            assert h.get("/healthz").status_code == 200
            slowest = max(slowest, time.monotonic() - t0)
            time.sleep(0.2)
        b.close()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, out + err
    assert re.search(r"\d+/155 teams read", out) and re.search(r"\d+/11935 pairs compared", out), out
    assert "done in" in out and "155 teams compared" in out, out
    assert slowest < 2.0, f"the server took {slowest:.2f} s to answer /healthz while the report ran"
