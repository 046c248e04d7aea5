"""Alembic environment: the server passes its open connection in ``config.attributes``."""

from alembic import context

from raiserver.store import tables  # noqa: F401  (registers the tables)
from raiserver.store.db import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through raiserver (raiserver migrate), which supplies the connection")
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
