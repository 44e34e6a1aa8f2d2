"""Scenario validation: each error is one line naming the field; model: jobs resolve."""
import copy
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from workloads.scenario import ScenarioError, load_scenario, parse_scenario, resolve

ROOT = Path(__file__).resolve().parents[1]
BASE = {
    "name": "t",
    "cluster": {"racks": 2, "hosts_per_rack": 2, "spines": 1, "gpus_per_host": 2,
                "host_link_gbps": 100, "uplink_gbps": 100, "gpu": "A100"},
    "jobs": [
        {"name": "a", "iterations": 5, "placement": {"slots": ["r0h0", "r1h0"]},
         "profile": {"phases": [{"op": "compute", "seconds": 0.05},
                                {"op": "allreduce", "bytes": "300MB", "overlap": 0.5}]}},
        {"name": "b", "iterations": 5, "workers": 4, "model": "resnet50",
         "placement": {"rule": "spread"}},
    ],
}


def err(mutate):
    d = copy.deepcopy(BASE)
    mutate(d)
    with pytest.raises(ScenarioError) as e:
        parse_scenario(d, "s.yaml")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("s.yaml: ")
    return msg[len("s.yaml: "):]


def test_base_is_valid_and_model_resolves():
    sc = parse_scenario(copy.deepcopy(BASE))
    rs = resolve(sc)
    b = rs.job("b")
    assert len(b.workers) == 4 and b.profile.collectives[0].bytes == pytest.approx(51.1e6, rel=0.01)


def test_zero_racks():
    assert err(lambda d: d["cluster"].update(racks=0)).startswith("cluster.racks:")


def test_negative_rate():
    m = err(lambda d: d["cluster"].update(host_link_gbps=-5))
    assert m.startswith("cluster.host_link_gbps:") and "-5" in m


def test_unknown_key():
    assert err(lambda d: d["jobs"][0].update(colour="red")) == "jobs.0.colour: unknown key"
    assert err(lambda d: d["cluster"].update(colour="red")) == "cluster.colour: unknown key"


def test_a_sweep_file_given_as_a_scenario_says_so():
    sweep = yaml.safe_load((ROOT / "sweeps" / "oversubscription.yaml").read_text())
    with pytest.raises(ScenarioError) as e:
        parse_scenario(sweep, "s.yaml")
    assert str(e.value) == ("s.yaml: a sweep, not a scenario (run it with: python -m analysis "
                            "sweep s.yaml)")


def test_job_on_missing_host():
    m = err(lambda d: d["jobs"][0]["placement"].update(slots=["r0h0", "r5h0"]))
    assert m.startswith("jobs.a.placement.slots:") and "r5h0" in m and "does not exist" in m


def test_negative_bytes():
    m = err(lambda d: d["jobs"][0]["profile"]["phases"][1].update(bytes=-5))
    assert re.match(r"jobs\.0\.profile\.phases\.1\.(allreduce\.)?bytes: ", m)
    assert m.count("(got") == 1


def test_more_workers_than_slots():
    m = err(lambda d: d["jobs"][1].update(workers=9))
    assert m.startswith("jobs.b.workers:") and "needs 9 workers" in m


def test_model_errors_name_the_field():
    assert err(lambda d: d["jobs"][1].update(model="alexnet")).startswith("jobs.b.model: unknown model")
    m = err(lambda d: d["jobs"][1].update(model="gpt3-13b"))
    assert m.startswith("jobs.b.model:") and "multiple of 8" in m
    m = err(lambda d: d["cluster"].update(gpu="V100"))
    assert m.startswith("jobs.b.model:") and "V100" in m


def test_simai_model_in_scenario():
    d = copy.deepcopy(BASE)
    d["jobs"][1].update(model="simai:micro_all_reduce")
    rs = resolve(parse_scenario(d))
    (c,) = rs.job("b").profile.collectives
    assert c.op == "allreduce" and c.group.size is None


def _doc_example():
    text = (ROOT / "docs" / "schema.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    full = [b for b in blocks if b.lstrip().startswith("name:")]
    assert full, "docs/schema.md has no full example"
    return full[0]


def test_docs_example_validates(tmp_path):
    p = tmp_path / "example.yaml"
    p.write_text(_doc_example())
    rs = resolve(load_scenario(p))
    assert any(j.spec.model for j in rs.jobs)


def test_shipped_scenarios_validate():
    for p in sorted((ROOT / "scenarios").glob("*.yaml")):
        resolve(load_scenario(p))


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "workloads", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_cli_validate(tmp_path):
    r = _cli("validate", "scenarios/pair-shared-spine.yaml")
    assert r.returncode == 0 and "OK" in r.stdout
    d = copy.deepcopy(BASE)
    d["cluster"]["racks"] = 0
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(d))
    r = _cli("validate", str(p))
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "cluster.racks" in lines[0]
    p.write_text("name: [unclosed\n")
    r = _cli("validate", str(p))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "YAML" in r.stderr


def test_a_run_refused_for_a_missing_stack_writes_nothing(tmp_path):
    """No Open vSwitch tools on PATH: one error line, and no run folder half-written."""
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "emulation", "run", "scenarios/pair-shared-spine.yaml",
                        "--policy", "fair", "--out", str(out)],
                       capture_output=True, text=True, env={"PATH": str(tmp_path)},
                       cwd=Path(__file__).resolve().parent.parent)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "not found: run ./scripts/setup.sh" in lines[0], r.stderr
    assert not out.exists() or not any(out.iterdir())
