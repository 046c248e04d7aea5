"""Issue 47: the client reads a job's results (``JobOut.results``, JSON) typed, through
raiprotocol.resultview.results_view, on the standard library; every name its view reads is checked here
against the wire model, so a renamed field fails a test instead of printing nothing."""

from __future__ import annotations

import typing

from helpers.results import MEASURED, PRINTED
from pydantic import BaseModel

from raiprotocol.models import JobResultSummary, Measured
from raiprotocol.resultview import MeasuredView, ResultsView, results_view


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


def test_the_printed_figures_are_facts_the_terminal_and_the_job_page_both_show(capsys):
    """One list of facts (raiprotocol.resultview.printed_facts) for the client's table and the job
    page's list: a metric added there shows on both."""
    from raiclient.output import print_results
    from raiprotocol.resultview import Fact, printed_facts

    sent = JobResultSummary.model_validate({**PRINTED.model_dump(), "elapsed_seconds": 3.5, "max_rss_kb": 2048 * 1024})
    facts = printed_facts(results_view(sent.model_dump(mode="json")))
    assert facts == [
        Fact("Op Time", "0.01 + 0.002 = 0.012 s"),
        Fact("Timing runs", "2: 0.012, 0.013 s", "median shown, spread 0.001 s"),
        Fact("Correctness", "0.9", "model a"),
        Fact("Correctness", "0.8", "model b"),
        Fact("Elapsed", "3.5 s"),
        Fact("Peak memory", "2,048 MiB"),
    ]
    print_results(sent.model_dump(mode="json"))
    table = capsys.readouterr().out
    for f in facts:
        assert f"{f.label}  " in table and (f"{f.value} ({f.note})" if f.note else f.value) in table, f
    assert printed_facts(results_view(None)) == []


def test_printed_figures_keep_their_digits():
    """The job page used to show every digit (%.6f); a fact keeps ten significant ones."""
    from raiprotocol.resultview import printed_facts

    sent = {"op_times": [1.2345e-05, 123.456789], "op_time_total": 123.456801345, "correctness": {"m": 0.99999996}}
    facts = printed_facts(results_view(sent))
    assert facts[0].value == "1.2345e-05 + 123.456789 = 123.4568013 s"
    assert facts[1].value == "0.99999996"  # not "1", which a threshold of 1 would contradict
