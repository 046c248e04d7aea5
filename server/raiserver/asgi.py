"""ASGI entry point for uvicorn/gunicorn: settings come from the environment."""

from .app import create_app

app = create_app()
