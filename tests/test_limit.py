"""The "limit" row: per job its isolated time, stretched by the load of its most loaded link
group at isolated pace where that exceeds the capacity (analysis/limit.py)."""
import pytest

from analysis.limit import job_limits
from scheduling.cases import _case
from workloads.scenario import dump_scenario


def _write(tmp_path, uplink_gbps, third=False):
    jobs = [("A", ["r0h0", "r1h0"], 0.05, 300e6), ("B", ["r0h1", "r1h1"], 0.05, 300e6)]
    if third:   # a rack-local job: host links only, no uplink
        jobs.append(("C", ["r0h2", "r0h3"], 0.05, 300e6))
    sc = _case("lim", 2, 4, 1, 1, jobs, uplink_gbps=uplink_gbps)
    p = tmp_path / "s.yaml"
    p.write_text(dump_scenario(sc))
    return p


def test_limit_is_isolated_where_nothing_is_oversubscribed(tmp_path):
    lim = job_limits(_write(tmp_path, 100.0))
    for v in lim.values():
        assert v["rho"] < 1.0 and v["limit_s"] == pytest.approx(v["isolated_s"])


def test_limit_stretches_by_the_load_of_a_shared_uplink(tmp_path):
    lim = job_limits(_write(tmp_path, 25.0, third=True))
    # a 2-worker ring moves the whole 300 MB each way: 0.096 s on a 25 Gb/s uplink; both
    # jobs load rack 0's uplinks alike, so rho = 2 x 0.096 / T0
    for n in ("A", "B"):
        t0 = lim[n]["isolated_s"]
        assert t0 == pytest.approx(0.05 + 0.096, rel=1e-6)
        assert lim[n]["rho"] == pytest.approx(2 * 0.096 / t0, rel=1e-6)
        assert lim[n]["limit_s"] == pytest.approx(t0 * lim[n]["rho"])
        assert lim[n]["group"].startswith("uplinks of rack")
    # the rack-local job shares no link: its isolated time
    assert lim["C"]["limit_s"] == pytest.approx(lim["C"]["isolated_s"])
    # measured isolated times are used when given
    lim2 = job_limits(_write(tmp_path, 25.0), {"A": 0.2, "B": 0.2})
    assert lim2["A"]["rho"] == pytest.approx(2 * 0.096 / 0.2)


def test_limit_on_payload_rate_stretches_the_capacity_bound(tmp_path):
    """The emulator's frames carry headers: at payload fraction f the link moves the bytes
    in 1/f the time, so the load rho of an oversubscribed group grows by 1/f."""
    p = _write(tmp_path, 25.0)
    iso = {"A": 0.2, "B": 0.2}
    full, framed = job_limits(p, iso), job_limits(p, iso, payload_fraction=0.9)
    for n in ("A", "B"):
        assert framed[n]["rho"] == pytest.approx(full[n]["rho"] / 0.9, rel=1e-9)
        assert framed[n]["limit_s"] == pytest.approx(2 * 0.096 / 0.9, rel=1e-6)


def test_limit_of_an_unreadable_scenario_is_empty(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("name: [")
    assert job_limits(p) == {}
