"""Every route of the API and the staff's term pages in one router (as the FastAPI template's
``api/main.py``): the app includes it once. The web view's own pages, with their session and error
pages, are mounted by ``pages.install``."""

from __future__ import annotations

from fastapi import APIRouter

from raiserver.api import regradepages, similaritypages, termpages
from raiserver.api.routes import admin, client, grades, jobs, kinds, leaderboard, regrades, similarity, workers

api_router = APIRouter()
for _module in (jobs, workers, leaderboard, admin, client, kinds, grades, regrades, similarity, termpages, regradepages, similaritypages):
    api_router.include_router(_module.router)
