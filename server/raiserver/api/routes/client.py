"""GET /client/: the client to download, with no account needed (it holds no secret): the one-file
``raiclient.pyz``, which runs every student command on a bare Python, and the wheels, listed as
links so that ``pipx install --pip-args='--find-links SERVER/client/' raiclient`` (or pip in a
venv) finds them for the full client (the admin commands). Every command on the page names this
server's own address, ready to copy."""

from __future__ import annotations

from html import escape

from fastapi import APIRouter, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, Response

from raiserver.api.clientdist import downloads

router = APIRouter(tags=["client"])


@router.get("/client/", response_class=HTMLResponse)
async def listing(request: Request) -> HTMLResponse:
    made = await run_in_threadpool(downloads)
    here = escape(str(request.base_url).rstrip("/"))
    rows = "".join(
        f'<li><a href="{escape(f.name)}">{escape(f.name)}</a> ({len(f.data) // 1024} KiB): {escape(f.what)}</li>\n'
        for f in made.files.values()
    )
    rows += "".join(f"<li>Not offered by this server: {escape(line)}</li>\n" for line in made.missing)
    return HTMLResponse(
        status_code=200 if made.files else 503,
        content=f"<!doctype html>\n<html><head><title>raiclient</title></head><body>\n<h1>raiclient</h1>\n"
        f"<p>Every student command, with nothing to install: <code>curl -O {here}/client/raiclient.pyz &amp;&amp; "
        f"python3 raiclient.pyz submit</code></p>\n"
        f"<p>The full client (staff's admin commands too), in its own environment: "
        f"<code>pipx install --pip-args='--find-links {here}/client/' raiclient</code>, or "
        f"<code>python3 -m venv ~/.venvs/raiclient &amp;&amp; "
        f"~/.venvs/raiclient/bin/pip install --find-links {here}/client/ raiclient</code></p>\n<ul>\n{rows}</ul>\n</body></html>\n",
    )


@router.get("/client/{name}")
async def download(name: str) -> Response:
    made = await run_in_threadpool(downloads)
    found = made.files.get(name)
    if found is None:
        why = "".join(f"; {line}" for line in made.missing)
        raise HTTPException(404, f"no {name} here; /client/ lists what there is{why}")
    return Response(
        found.data,
        media_type=found.media_type,
        headers={"Content-Disposition": f'attachment; filename="{found.name}"', "Cache-Control": "no-cache"},
    )
