"""raiserver: the FastAPI service that owns jobs, storage and the database."""

__version__ = "0.1.0"
