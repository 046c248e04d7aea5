"""The web view, beside the JSON API's ``routes/``: ``site`` (login, the queue, a job's page, users,
workers; the session, the static files and the error pages), ``term`` (deadlines, kinds, grades),
``regrades`` and ``similarity`` (staff's pages for each)."""
