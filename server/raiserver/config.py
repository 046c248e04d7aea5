"""Server settings, from the environment (``RAI_*``) with safe defaults for one machine."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from pydantic import AliasChoices, BeforeValidator, Field
from pydantic_settings import NoDecode

from raiprotocol.settings import CommaList, SharedSettings

DEFAULT_SECRETS = ("change-me-worker-token", "change-me-session-secret", "change-me-pseudonym-secret")
ANY_QUEUE = "*"


def _image_rules(value: Any) -> Any:
    """ "img1 img2" for every queue, "gpu=img1 img2; cpu=img3" per queue, "" for any image."""
    if not isinstance(value, str):
        return value
    rules: dict[str, list[str]] = {}
    for entry in value.split(";"):
        queue, sep, images = entry.partition("=")
        if entry.strip():
            rules.setdefault(queue.strip() if sep else ANY_QUEUE, []).extend((images if sep else entry).split())
    return rules


class Settings(SharedSettings):
    data_dir: Path = Path("./.rai-data")
    database_url: str = Field(default="", validation_alias=AliasChoices("DATABASE_URL", "RAI_DATABASE_URL"))
    public_url: str = ""  # how clients reach us, for links; empty = from the request

    default_queue: str = "gpu"
    max_upload_bytes: int = 200 * 1024**2
    max_build_bytes: int = 1024**3
    max_image_bytes: int = 20 * 1024**3  # a `docker save` tar staff upload for workers to load
    max_attempts: int = 3
    reaper_interval: float = 5.0
    release_again_seconds: float = 20.0  # a released job no worker claimed: released again (a lost message)
    log_ttl_seconds: int = 600  # live stream kept in Redis after the job, for late readers
    # concurrent log streams (SSE): past a cap the answer is 429/503 with Retry-After, never a
    # stream that breaks halfway; a watcher more than stream_buffer_lines behind is cut off and resumes
    streams_per_student: int = 10
    streams_per_staff: int = 500
    streams_per_process: int = 5000
    stream_buffer_lines: int = 500_000
    session_secret: str = "change-me-session-secret"
    pseudonym_secret: str = "change-me-pseudonym-secret"  # keys the leaderboard's pseudonyms
    secrets_file: Path | None = None  # KEY=VALUE file (`raiserver secrets`); the environment wins
    cookie_secure: bool | None = None  # Secure session cookie; default: when public_url is https
    hsts_seconds: int = Field(default=31_536_000, ge=0)  # Strict-Transport-Security over HTTPS (a year); 0 = none
    # failed logins in 10 minutes: past per_ip an address's wrong credentials get 429 (right ones are
    # still served); past per_key one (address, key) pair waits 15 s, doubling, at most 5 minutes
    login_failures_per_ip: int = 100
    login_failures_per_key: int = 10
    metrics_token: str = ""  # /metrics: loopback only, or Bearer this token
    # reverse proxies (addresses or networks, e.g. "127.0.0.1,10.0.0.0/8") whose X-Real-IP and
    # X-Forwarded-Proto are believed; empty = no forwarding header is believed at all
    trusted_proxies: CommaList = []
    # connections (raiserver.access.guard): headers due within, request body silent for at most, and open
    # connections per client address per server process (0 = no limit; behind a proxy, let it limit)
    header_seconds: float = 10.0
    body_idle_seconds: float = 30.0
    connections_per_address: int = 1000
    # people's requests a process computes at once, and at most this many of one caller's
    # (access/admission.py: the rest wait holding nothing; the workers' calls never wait here)
    requests_at_once: int = Field(default=8, ge=1)
    requests_per_caller: int = Field(default=4, ge=1)
    # storage per student (archives + build folders; 0 = no limit), and retention of the files of
    # finished runs of other kinds than the verified one (`raiserver retention --apply`; 0 = keep)
    storage_mb_per_student: int = 2048
    retain_days: int = 30
    retain_log_days: int = 180
    # uploads per student: attempts a minute, refused ones included, and uploads in flight at once
    upload_attempts_per_minute: int = 20
    uploads_in_flight: int = 2

    # people and fairness
    max_active_jobs: int = 2  # per student: waiting or running at once
    submissions_per_minute: int = 5
    submissions_per_day: int = 0  # per student in the last 24 hours; 0 = no daily limit
    late_days: int = 0  # per student: late days to spend on kinds whose late policy is "days" (issue 36)
    # regrade requests per student (issue 50): open at once, and asked in the last 24 hours
    regrades_open_per_student: int = Field(default=3, ge=1)
    regrades_per_day: int = Field(default=5, ge=1)
    gpu_minutes_per_day: float = 0  # 0 = no daily limit
    staff_exempt: bool = True
    staff_priority: bool = True
    priority_kinds: CommaList = []  # e.g. "final": released before other kinds
    dispatch_interval: float = 0.5

    # images a build file may name: "img1 img2" for every queue, "gpu=img1 img2; cpu=img3" per queue;
    # empty = any image the workers have
    allowed_images: Annotated[dict[str, list[str]], NoDecode, BeforeValidator(_image_rules)] = {}

    # the submission kinds of the course (`raiclient submit --kind`), with RAI_DEADLINE the seed of the
    # kinds table at the upgrade to it (issue 36); from then on `raiclient admin kinds` manages them
    kinds: CommaList = ["dev", "m1", "m2", "m3", "final"]

    # results and ranking
    correctness_threshold: float = 0.8  # every model's correctness must reach this to be ranked
    # Only runs the service built, timed and checked itself rank (issue 23): runs of a ranked kind
    # made with the course's build file (`raiclient admin course install`). A student's own build
    # file can print any "Op Time", so other runs are shown apart, unranked.
    ranked_kinds: CommaList = []  # kinds that may rank; empty = the verified kind and harness kinds
    harness_kinds: CommaList = []  # more kinds the course installs a build file for
    verified_kind: str = "final"  # the kind with the deadline, the required report and kept for good
    leaderboard_policy: str = "best"  # "best": each team's fastest run; "last": its latest valid run
    leaderboard_hidden_until_deadline: bool = False  # students see only their own row until RAI_DEADLINE
    # how often each server process brings its boards and grade sheets up to date in the background
    # (services/warm.py; a pass also just after it starts), so that no look waits while they are made
    # from every run of the term; 0: only when someone looks
    warm_seconds: float = Field(default=30.0, ge=0)
    final_requires: CommaList = ["report.pdf"]  # files a 'final' submission must contain
    deadline: datetime | None = None  # seeds the verified kind's deadline (late runs kept, not ranked)
    timing_repeats: int = 1  # ranked kinds: run the timing command this many times, exclusive on the host
    repeat_kinds: CommaList = ["final"]

    @property
    def kind_set(self) -> set[str]:
        """Every kind a submission may name: the course's list and those the other settings name."""
        return {*self.kinds, self.verified_kind, *self.harness_kinds, *self.ranked_kinds, *self.repeat_kinds}

    @property
    def verified_kinds(self) -> set[str]:
        return {self.verified_kind, *self.harness_kinds}

    @property
    def ranked_kind_set(self) -> set[str]:
        return set(self.ranked_kinds) or self.verified_kinds

    def images_allowed_on(self, queue: str) -> list[str] | None:
        """The images allowed on a queue, or None when any image is."""
        if not self.allowed_images:
            return None
        return [*self.allowed_images.get(ANY_QUEUE, []), *self.allowed_images.get(queue, [])]

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'rai.sqlite3').resolve()}"


def load_settings() -> Settings:
    """Settings from the environment, and from RAI_SECRETS_FILE for what the environment leaves unset."""
    return Settings.load()
