"""ASGI entry point for uvicorn/gunicorn: settings come from the environment."""

from raiserver.access.hardening import bind_host, check_deployment, private_files
from raiserver.app import create_app
from raiserver.config import load_settings

settings = load_settings()
check_deployment(settings, bind_host())
private_files(settings)  # under a bare uvicorn or gunicorn too
app = create_app(settings)
