"""The interleaved A/B tool (emulation/abtest.py): sides parsed from the command line, and
each side's iteration times read back in trace time with its own time scale."""
import pytest

from emulation import abtest

HEADER = "job,rank,iteration,start_s,compute_s,comm_s,end_s,sent_bytes,recv_bytes,shift_s,status,detail\n"


def _run_dir(tmp_path, name, iter_wall_s, n=8):
    d = tmp_path / name
    (d / "logs").mkdir(parents=True)
    lines = [f"jobA,0,{i},{i * iter_wall_s:.6f},0,0,{(i + 1) * iter_wall_s:.6f},0,0,,ok,\n"
             for i in range(n)]
    (d / "logs" / "jobA.csv").write_text(HEADER + "".join(lines))
    return {"side": name.split("-")[0], "dir": str(d), "rc": 0, "load_before": 0.1,
            "cpu": {"headroom_median": 0.9}, "verdict": "faithful"}


def test_a_side_parses_its_time_scale_and_rejects_unknown_keys():
    side = abtest.parse_side("slow:time_scale=20,bandwidth_scale=4000,iterations=105")
    assert side["emulation"] == {"time_scale": 20.0, "bandwidth_scale": 4000.0}
    assert side["iterations"] == 105
    with pytest.raises(SystemExit):
        abtest.parse_side("x:time_skale=20")


def test_each_side_is_read_in_trace_time_with_its_own_time_scale(tmp_path):
    """The same 56 ms trace iteration emulated at time scales 10 and 20 (0.56 and 1.12 s of
    wall time) reads 56 ms on both sides."""
    recs = [_run_dir(tmp_path, "ts10-1", 0.56), _run_dir(tmp_path, "ts20-1", 1.12),
            _run_dir(tmp_path, "ts10-2", 0.56), _run_dir(tmp_path, "ts20-2", 1.12)]
    sides = [abtest.parse_side("ts10:time_scale=10"), abtest.parse_side("ts20:time_scale=20")]
    lines = abtest.table(recs, sides, first=2, count=0, ts=10.0)
    assert len(lines) == 2
    for line in lines:
        assert "mean iter   56.00 ms" in line, line
        assert "runs 2" in line


def test_a_stagger_side_sets_each_jobs_arrival():
    """``stagger=S``: job k of the scenario arrives k*S trace seconds after the first."""
    base = {"name": "pair", "emulation": {"time_scale": 10},
            "jobs": [{"name": "jobA"}, {"name": "jobB"}, {"name": "jobC"}]}
    sc = abtest.scenario_for(base, abtest.parse_side("s28:stagger=0.028"))
    assert [j["arrival_s"] for j in sc["jobs"]] == [0.0, 0.028, 0.056]
    assert sc["name"] == "pair-s28"
    assert "arrival_s" not in base["jobs"][1]
    assert "arrival_s" not in abtest.scenario_for(base, abtest.parse_side("b:"))["jobs"][1]
