"""Issue 47: the client reads a job's results (``JobOut.results``, JSON) typed, through
raiclient.output.results_view, on the standard library; every name its view reads is checked here
against the wire model, so a renamed field fails a test instead of printing nothing."""

from __future__ import annotations

import typing

from helpers.results import MEASURED, PRINTED
from pydantic import BaseModel

from raiclient.output import MeasuredView, ResultsView, results_view
from raiprotocol.models import JobResultSummary, Measured


def _fields(model: type[BaseModel]) -> dict[str, object]:
    return typing.get_type_hints(model)


def test_the_clients_view_names_only_fields_of_the_wire_model():
    assert set(ResultsView._fields) <= set(_fields(JobResultSummary))
    assert set(MeasuredView._fields) <= set(_fields(Measured))


def test_the_client_reads_the_json_the_server_sends():
    sent = JobResultSummary.model_validate({**PRINTED.model_dump(), "max_rss_kb": 2048, "measured": MEASURED.model_dump()})
    view = results_view(sent.model_dump(mode="json"))
    assert view.op_times == [0.01, 0.002] and view.op_time_total == 0.012 and view.correctness == {"a": 0.9, "b": 0.8}
    assert view.max_rss_kb == 2048 and view.elapsed_seconds is None
    assert view.measured is not None and view.measured.op_time == 0.0123 and list(view.measured.flags) == ["slow start"]
    for name in ResultsView._fields:
        if name != "measured":
            assert getattr(view, name) == getattr(sent, name), name
    for name in MeasuredView._fields:
        assert getattr(view.measured, name) == getattr(sent.measured, name), name
    empty = results_view(None)
    assert empty == results_view({}) == ResultsView() and empty.measured is None
    assert results_view({"op_times": None, "measured": {}}) == ResultsView()  # null and empty: the defaults
