"""raiserver: the FastAPI service that owns jobs, storage and the database."""
