"""The service's HTTP face: the JSON API's routes, the web view's pages and their FastAPI dependencies (who calls, with which rights)."""
