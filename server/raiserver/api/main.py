"""Every route of the API and the staff's term pages in one router (as the FastAPI template's
``api/main.py``): the app includes it once. The web view's own pages, with their session and error
pages, are mounted by ``pages.site.install``."""

from __future__ import annotations

from fastapi import APIRouter

from raiserver.api.pages import regrades as regrade_pages
from raiserver.api.pages import similarity as similarity_pages
from raiserver.api.pages import term as term_pages
from raiserver.api.routes import admin, client, grades, jobs, kinds, leaderboard, regrades, similarity, workers

api_router = APIRouter()
ROUTERS = (jobs, workers, leaderboard, admin, client, kinds, grades, regrades, similarity, term_pages, regrade_pages, similarity_pages)
for _module in ROUTERS:
    api_router.include_router(_module.router)
