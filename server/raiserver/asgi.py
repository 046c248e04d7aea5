"""ASGI entry point for uvicorn/gunicorn: settings come from the environment."""

from .app import create_app
from .config import load_settings
from .hardening import bind_host, check_deployment

settings = load_settings()
check_deployment(settings, bind_host())
app = create_app(settings)
