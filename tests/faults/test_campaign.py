"""The fault campaign's reduced form (every fault at two moments, every pause of issue 33 once) on
the real service; the full form is `python tests/faults/campaign.py` (README, "Faults")."""

from __future__ import annotations

import pytest

from .campaign import FAULTS, REDUCED_LEASE, REDUCED_MOMENTS, REDUCED_PAUSES, Campaign, table

pytestmark = [pytest.mark.timeout(400), pytest.mark.own_workers]  # workers faults, faults2 and a Redis of its own


@pytest.fixture(scope="module")
def campaign(tmp_path_factory, docker_engine):
    c = Campaign(tmp_path_factory.mktemp("faults"))
    yield c
    c.close()


@pytest.mark.parametrize("moment", REDUCED_MOMENTS)
@pytest.mark.parametrize("fault", FAULTS)
def test_fault(campaign, fault, moment):
    run = campaign.run(fault, moment)
    print(table([run]))
    assert run.ok, table([run])


@pytest.mark.parametrize(("fault", "moment"), REDUCED_PAUSES)
def test_pause(campaign, fault, moment):
    run = campaign.run(fault, moment)
    print(table([run]))
    assert run.ok, table([run])


@pytest.mark.parametrize(("fault", "moment"), REDUCED_LEASE)
def test_lease_window(campaign, fault, moment):
    """Issue 51: the whole worker paused, or cut off, for less than its lease and its margin: the
    job's command never runs twice at once, and a run stopped by the lease runs again."""
    run = campaign.run(fault, moment)
    print(table([run]))
    assert run.ok, table([run])
