"""``raiclient submit``: pack the project, upload it, follow the job live, say how it ended.

A student runs this more than anything else, so it runs on the standard library: no typer, rich,
httpx or pydantic is imported on its way (they cost a third of a second before the first byte
goes up). ``entry.py`` hands it the common command lines directly; the full command line (typer)
parses the rest and calls the same ``run``. The heavier pieces come in only where they pay:

- a project packed to more than ``PRECHECK_BYTES`` has its build file checked here and the
  credentials on the server before it goes up (with a progress bar on a terminal); a small one goes
  up at once and the server, which checks both anyway, answers with the same sentences;
- when the live stream breaks (bad Wi-Fi, a server restart), ``cli.follow_job`` takes over from
  the last line printed and reconnects with back-off, so nothing is lost or printed twice.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlencode, urlsplit

from raiprotocol.archive import ArchiveLimits
from raiprotocol.profile import Profile, ProfileError, load_profile
from raiprotocol.project import project_problem
from raiprotocol.states import ExitCode

from . import __version__, tls
from .errors import ApiError, broke_off, no_answer, refusal, unreachable, untrusted
from .output import LogPrinter, WaitNotes, detached_line, error, finish, kib, say

# Projects up to this size go up without a check first: a bad key or build file then costs the
# student under a second of upload on an ordinary link, while the check (pydantic's import and a
# round trip, ~0.25 s on a laptop) would cost every good submit. Bigger ones are checked first.
PRECHECK_BYTES = 1024 * 1024
CHUNK = 256 * 1024


def _proxy_for(scheme: str, host: str) -> str | None:
    """The proxy the environment names for this server, as httpx would use it (NO_PROXY honoured)."""
    env = {k.lower(): v for k, v in os.environ.items() if k.lower().endswith("_proxy") and v}
    for entry in env.get("no_proxy", "").split(","):
        entry = entry.strip().lstrip(".")
        if entry == "*" or (entry and (host == entry or host.endswith("." + entry))):
            return None
    return env.get(f"{scheme}_proxy") or env.get("all_proxy")


class _Reading:
    """A file read as it is sent, telling ``progress`` how much went."""

    def __init__(self, fh: BinaryIO, progress: Callable[[int], None]):
        self.fh, self.progress = fh, progress

    def read(self, n: int = -1) -> bytes:
        data = self.fh.read(CHUNK if n < 0 else n)
        if data:
            self.progress(len(data))
        return data


class Http:
    """One kept-alive connection to the server with the profile's key (standard library only)."""

    def __init__(self, profile: Profile, timeout: float = 30.0):
        self.server = profile.server
        url = urlsplit(profile.server)
        self.base = url.path.rstrip("/")
        self.headers = {
            "Authorization": "Basic " + base64.b64encode(f"{profile.access_key}:{profile.secret_key}".encode()).decode(),
            "User-Agent": f"raiclient/{__version__}",
        }
        host, port, https = url.hostname or "", url.port, url.scheme == "https"
        proxy = _proxy_for(url.scheme, host)
        if proxy is not None:
            p = urlsplit(proxy if "://" in proxy else "http://" + proxy)
            if p.username:
                self.headers["Proxy-Authorization"] = "Basic " + base64.b64encode(f"{p.username}:{p.password or ''}".encode()).decode()
            if not https:  # a plain-HTTP proxy takes the whole address in the request line
                self.base = f"http://{url.netloc.rpartition('@')[2]}{self.base}"
            host, port = p.hostname or "", p.port or (443 if p.scheme == "https" else 80)
        self.conn = (http.client.HTTPSConnection(host, port, timeout=timeout, context=tls.context()) if https
                     else http.client.HTTPConnection(host, port, timeout=timeout))
        if proxy is not None and https:
            self.conn.set_tunnel(url.hostname or "", url.port, headers={k: v for k, v in self.headers.items() if k.startswith("Proxy-")})

    def close(self) -> None:
        self.conn.close()

    def send(self, method: str, path: str, params: dict[str, str] | None = None, body: Any = None,
             headers: dict[str, str] | None = None, timeout: float | None = None) -> http.client.HTTPResponse:
        """The answer, whatever its status; transport failures are ApiErrors."""
        url = self.base + path + (f"?{urlencode(params)}" if params else "")
        if timeout is not None:
            self.conn.timeout = timeout
            if self.conn.sock is not None:
                self.conn.sock.settimeout(timeout)
        try:
            self.conn.request(method, url, body=body, headers={**self.headers, **(headers or {})})
        except ssl.SSLCertVerificationError as exc:
            raise untrusted(self.server, exc.verify_message or str(exc)) from None
        except (ConnectionRefusedError, socket.gaierror):
            raise unreachable(self.server) from None
        except TimeoutError:
            raise no_answer(self.server) from None
        except OSError:
            if self.conn.sock is None:  # never connected
                raise unreachable(self.server) from None
            # the server may have answered before reading the whole body (a refusal): read it below
        try:
            return self.conn.getresponse()
        except TimeoutError:
            raise no_answer(self.server) from None
        except (http.client.HTTPException, OSError):
            raise broke_off(self.server) from None

    def json(self, method: str, path: str, **kw: Any) -> Any:
        resp = self.send(method, path, **kw)
        try:
            body = resp.read()
        except (http.client.HTTPException, OSError):
            raise broke_off(self.server) from None
        if not 200 <= resp.status < 300:
            raise refusal(resp.status, body, resp.reason, resp.getheader("Retry-After"))
        return json.loads(body)

    def events(self, path: str) -> Iterator[tuple[str, str, str | None]]:
        """Server-sent events (name, data, id) until the stream ends; raises ApiError on a refusal
        and lets OSError/HTTPException through when the connection breaks."""
        resp = self.send("GET", path, headers={"Accept": "text/event-stream"}, timeout=60.0)
        if resp.status != 200:
            raise refusal(resp.status, resp.read(), resp.reason, resp.getheader("Retry-After"))
        name, event_id = "message", None
        data: list[str] = []
        while True:
            raw = resp.readline()
            if not raw:
                return
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if not line:
                if data:
                    yield name, "\n".join(data), event_id
                name, data = "message", []
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
            elif field == "id":
                event_id = value


def _too_big(found: Any, what: str, limit: str) -> str:
    """A refusal that helps: what is too big, the largest files, and how to leave them out."""
    largest = "\n".join(f"  {kib(size):>12}  {rel}" for rel, size in found.largest if size)
    return (f"the project is too big to upload: {what} (the limit is {limit}). Its largest files:\n{largest}\n"
            "Leave out what the build does not need with a .raiignore file in the project (gitignore syntax), e.g. "
            f"a line '{found.largest[0][0] if found.largest else 'data/'}'")


def _check_spec(path: Path) -> None:
    """The build file read and checked here (pydantic's import is worth it before a big upload);
    raises ApiError with every message."""
    from raiprotocol.spec import SpecError, load_spec

    try:
        load_spec(path)
    except SpecError as exc:
        raise ApiError("\n".join(exc.messages)) from None


def _upload(conn: Http, archive: Path, size: int, queue: str | None, kind: str) -> dict[str, Any]:
    params = {"kind": kind, **({"queue": queue} if queue else {})}
    headers = {"Content-Type": "application/gzip", "Content-Length": str(size)}
    with archive.open("rb") as fh:
        if size > PRECHECK_BYTES and os.isatty(1):  # long enough to deserve a bar
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

            with Progress(TextColumn("[bold cyan]✱[/] Uploading"), BarColumn(), DownloadColumn(), TransferSpeedColumn()) as bar:
                task = bar.add_task("upload", total=size)
                return conn.json("POST", "/api/v1/jobs", params=params, headers=headers, timeout=300.0,
                                 body=_Reading(fh, lambda n: bar.advance(task, n)))
        started = time.monotonic()
        job = conn.json("POST", "/api/v1/jobs", params=params, headers=headers, timeout=300.0, body=fh)
        if size > PRECHECK_BYTES:
            rate = size / max(time.monotonic() - started, 1e-3) / 1024**2
            say(f"Uploaded {kib(size)}" + (f" ({rate:.1f} MB/s)" if size >= 1024**2 else ""))
        return job


def follow(conn: Http, profile: Profile, job_id: str, position: int | None = None, eta: float | None = None) -> int:
    """Print the job's log as it comes and how it ended; Ctrl-C detaches without cancelling.
    ``position``: the one the submit line said (not said again)."""
    printer = LogPrinter()
    notes = WaitNotes(position, eta)
    last = 0
    try:
        try:
            from raiprotocol import logwire

            for name, data, _ in conn.events(f"/api/v1/jobs/{job_id}/log"):
                if name == "lines":
                    batches = [b for b in (x.after(last) for x in logwire.loads(data)) if b is not None]
                    if batches:
                        printer.batches(batches)
                        last = batches[-1].last
                elif name == "status":
                    note = notes.line(json.loads(data))
                    if note:
                        say(note)
                elif name == "end":
                    return finish(json.loads(data), conn.server)
        except (ApiError, http.client.HTTPException, OSError, ValueError) as exc:
            if isinstance(exc, ApiError) and exc.status is not None and exc.status < 500 and exc.status != 429:
                raise  # refused for good (no such job, …); 429 and 5xx: the full client waits and retries
        printer.flush()
    except KeyboardInterrupt:
        printer.flush()
        say(detached_line(job_id, last))
        return ExitCode.DETACHED
    # the stream broke before the end: the full client reconnects from the last line printed
    from typer import Exit

    from .api import Api
    from .cli import follow_job

    api = Api(profile)
    try:
        return follow_job(api, job_id, after=last)
    except Exit as exc:  # its failures end a typer command; here they are this function's answer
        return exc.exit_code
    finally:
        api.close()


def run(path: Path, queue: str | None, kind: str, detach: bool, server: str | None) -> int:
    """The whole submit; returns the exit status (ApiErrors become one line on stderr)."""
    from .pack import TooBig, pack_project, survey

    problem = f"{path} is not a folder" if not path.is_dir() else project_problem(path, kind)
    if problem:
        error(problem)
        return ExitCode.CLIENT_ERROR
    try:
        profile = load_profile(server)
    except ProfileError as exc:
        error(str(exc))
        return ExitCode.CLIENT_ERROR
    conn = Http(profile)
    try:
        packed = None
        try:
            found = survey(path)  # the sizes alone, in a moment: a big project is refused before any packing
            limits = ArchiveLimits()
            if found.files > limits.max_files or found.bytes > limits.max_unpacked_bytes:
                raise ApiError(_too_big(found, f"{found.files} files, {kib(found.bytes)}",
                                        f"{limits.max_files} files, {kib(limits.max_unpacked_bytes)}"))
            max_upload = None
            if found.bytes > PRECHECK_BYTES:  # worth checking here first: the build file, then the keys
                _check_spec(path)
                max_upload = conn.json("GET", "/api/v1/me").get("max_upload_bytes")  # a bad key fails here, not after packing
                if max_upload and found.packed_guess > max_upload:
                    raise ApiError(_too_big(found, f"about {kib(found.packed_guess)} packed", kib(max_upload)))
                if found.bytes > limits.ratio_floor_bytes and found.bytes / max(found.packed_guess, 1) > limits.max_ratio:
                    raise ApiError(_too_big(found, f"{kib(found.bytes)} that would pack to about {kib(found.packed_guess)} "
                                                   "(files of zeros or filler?)", f"{limits.max_ratio:.0f}x"))
            say(f"Submitting as {profile.username or profile.access_key[:8]} @ {profile.server}")
            try:
                packed = pack_project(path, max_bytes=max_upload)
            except TooBig:
                raise ApiError(_too_big(found, f"more than {kib(max_upload or 0)} packed", f"{kib(max_upload or 0)}")) from None
            say(f"Packing project ({packed.files} files, {kib(packed.bytes)}" + (", .raiignore applied)" if packed.ignore_applied else ")"))
            if found.bytes > limits.ratio_floor_bytes and found.bytes / max(packed.bytes, 1) > limits.max_ratio:
                raise ApiError(_too_big(found, f"{kib(found.bytes)} that pack to {kib(packed.bytes)} (files of zeros or filler?)",
                                        f"{limits.max_ratio:.0f}x"))
            job = _upload(conn, packed.path, packed.bytes, queue, kind)
        finally:
            if packed is not None:
                packed.path.unlink(missing_ok=True)
        eta = f", about {job['eta_seconds']:.0f} s" if job.get("position") and job.get("eta_seconds") else ""
        position = f" (position {job['position']}{eta})" if job.get("position") else ""
        say(f"Job {job['id']} queued on '{job['queue']}'{position}  [image {job['image']}]")
        if detach:
            say(f"Detached. Follow: raiclient logs {job['id']} --follow   Status: raiclient status {job['id']}")
            return ExitCode.OK
        return follow(conn, profile, job["id"], job.get("position"), job.get("eta_seconds"))
    except ApiError as exc:
        for line in str(exc).split("\n"):
            error(line)
        return exc.code
    except KeyboardInterrupt:
        error("interrupted while submitting; 'raiclient history' shows whether the job was queued")
        return ExitCode.DETACHED
    finally:
        conn.close()
