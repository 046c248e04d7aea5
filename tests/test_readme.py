"""The README's opening transcript is what `raiclient submit -p examples/hello` really prints
(issue 26: it showed an 'Uploaded N bytes' line the client never printed)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from helpers import ROOT


def normalized(text: str) -> list[str]:
    text = re.sub(r"\b[0-9A-HJKMNP-TV-Z]{26}\b", "JOB", text)  # job ids
    text = re.sub(r"http://127\.0\.0\.1:\d+", "SERVER", text)
    text = re.sub(r"Worker \S+ started the container( ahead of time)?", "Worker W started the container", text)
    text = re.sub(r"in \d+\.\d s$", "in N s", text, flags=re.M)
    # a gzip's size follows the files' times, which a fresh clone sets anew (CI saw 835 for 836)
    text = re.sub(r"(\d+ files), \d+ bytes", r"\1, N bytes", text)
    return [line for line in text.splitlines() if line.strip()]


def test_the_readme_transcript_is_the_real_one(docker_service):
    block = ROOT.joinpath("README.md").read_text().split("```\n$ raiclient submit -p examples/hello\n", 1)[1].split("```", 1)[0]
    env = {**os.environ, "RAI_PROFILE": str(docker_service.profile), "RAI_SERVER": docker_service.url, "PYTHONUNBUFFERED": "1"}
    res = subprocess.run(
        [sys.executable, "-m", "raiclient", "submit", "-p", "examples/hello"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout
    assert normalized(res.stdout) == normalized(block)
