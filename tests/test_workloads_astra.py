"""ASTRA-sim text workloads: every policy imports, maps onto ranks as ASTRA-sim's workload
layer does, runs in the simulator; malformed files give one line and exit 2."""
import hashlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from simulation.engine import simulate
from workloads import astra, simai
from workloads.flows import collective_flows
from workloads.scenario import Compute, Group, parse_scenario, resolve

ROOT = Path(__file__).resolve().parents[1]
FILES = astra.shipped()
ALL, DIM0, UPPER = Group(size=8), Group(size=2, stride=1), Group(size=4, stride=2)  # 8 ranks, P=2


def _coll(prof, n=8):
    """{(op, group): bytes} of a profile (a group of all ranks written as Group(size=n))."""
    out = {}
    for c in prof.collectives:
        k = (c.op, Group(size=c.group.size or n, stride=c.group.stride))
        out[k] = out.get(k, 0.0) + c.bytes
    return out


def _ops(prof):
    return simai.summarize(prof)["bytes"]


def test_shipped_set_and_provenance():
    assert len(FILES) == 28
    prov = (astra.DATA_DIR / "PROVENANCE.md").read_text()
    assert "MIT" in prov and "c2335b7579eb85356905b2979f120a53ad78b111" in prov
    for f in FILES:   # every file listed with its size and hash prefix
        row = f"| `{f.name}` | {f.stat().st_size} | `{hashlib.sha256(f.read_bytes()).hexdigest()[:16]}` |"
        assert row in prov, f.name
    policies = {f.read_text().split()[0] for f in FILES}
    assert policies == {"MICRO", "DATA", "HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD",
                        "MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_DLRM",
                        "HYBRID_CUSTOMIZED"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_sample_imports_and_runs_in_the_simulator(path):
    prof = simai.import_file(path, workers=8)
    assert isinstance(prof.phases[0], Compute) and prof.collectives
    for c in prof.collectives:
        assert 0.0 <= c.overlap <= 1.0
        assert collective_flows(c, 8)          # every collective moves data between 8 ranks
    rs = resolve(parse_scenario({
        "name": "astra", "backend": "simulation",
        "cluster": {"racks": 2, "hosts_per_rack": 2, "gpus_per_host": 2,
                    "host_link_gbps": 100, "uplink_gbps": 100},
        "jobs": [{"name": "j", "model": f"simai:{path.stem}", "workers": 8, "iterations": 3}]}))
    assert rs.jobs[0].profile == prof              # the scenario resolves to the same profile
    res = simulate(rs, None)
    times = res.iteration_times("j")
    assert len(times) == 3
    for t in times:
        assert t > prof.compute_s                  # communication takes time on the network


# ---------------------------------------------------------------------------
# one file of each policy against a hand computation
# ---------------------------------------------------------------------------

MIB = 1 << 20


def test_micro_and_data_and_transformers():
    # MICRO: one weight-gradient collective over all ranks, 3 x 5 ticks of compute
    p = simai.import_file(astra.DATA_DIR / "AllToAll_1MB.txt", workers=8)
    assert _coll(p) == {("alltoall", ALL): 1048576}
    assert p.compute_s == pytest.approx(15e-9)
    # DATA: ResNet-50's weight gradients, about 25.5 M fp32 parameters, all-reduced over all
    p = simai.import_file(astra.DATA_DIR / "Resnet50_DataParallel.txt", workers=8)
    assert _coll(p) == {("allreduce", ALL): 25_502_912 * 4}
    # HYBRID_TRANSFORMER, TP group 2: six blocks; per block forward 2 x 8 MiB all-reduce
    # (Concat, X W2), input-gradient 2 x 8 MiB all-reduce (Q, Relu) and a 128 MiB all-gather
    # (Concat), weight-gradient 4 x 32 MiB + 2 x 128 MiB; plus the embedding's 8 MiB and the
    # classifier's 73,728,000 B forward all-gather, its 8 MiB input-gradient and 18,432,000 B
    # weight-gradient all-reduce.
    p = simai.import_file(astra.DATA_DIR / "Transformer_HybridParallel.txt", workers=8)
    tp, dp = Group(size=2, stride=1), Group(size=4, stride=2)
    assert _coll(p) == {("allreduce", tp): 6 * 32 * MIB + 8 * MIB,
                        ("allgather", tp): 8 * MIB + 73_728_000 + 6 * 128 * MIB,
                        ("allreduce", dp): 6 * (4 * 32 + 2 * 128) * MIB + 18_432_000}
    p = simai.import_file(astra.DATA_DIR / "Transformer_HybridParallel_Fwd_In_Bckwd.txt", workers=8)
    assert _ops(p) == {"allreduce": 348_700_672 + 348_651_520 + 1_176_732_928}


MLP_FWD = [37632, 65536, 65536, 147456, 65536, 65536]     # the six MLP rows' sizes


def test_model_parallel():
    m = astra.build(astra.parse_file(astra.DATA_DIR / "MLP_ModelParallel.txt"), workers=8)
    # forward all-gathers of every row, input-gradient all-reduces of rows 1-5 (ASTRA-sim sends
    # no input gradient for the first layer), no weight-gradient traffic; all over every rank
    assert _coll(m.profile) == {("allgather", ALL): sum(MLP_FWD),
                                ("allreduce", ALL): sum(MLP_FWD[1:])}
    assert sum(MLP_FWD) == 447_232 and sum(MLP_FWD[1:]) == 409_600
    assert [msg.split(":")[0] for msg in m.ignored] == ["line 3 (layer_64_1_mlp0) input-grad ALLREDUCE 37632 B"]
    assert m.labels[:3] == ["compute: forward", "forward", "input-grad"]
    fwd = (32291 + 7488 + 7488 + 14144 + 7488 + 9984) * 1e-9
    assert m.profile.phases[0].seconds == pytest.approx(fwd)


@pytest.mark.parametrize("name, model, data", [
    ("MLP_HybridParallel_Data_Model.txt", DIM0, UPPER),   # model inside a package
    ("MLP_HybridParallel_Model_Data.txt", UPPER, DIM0),   # model across packages
])
def test_hybrid_data_model_orders(name, model, data):
    m = astra.build(astra.parse_file(astra.DATA_DIR / name), workers=8)
    assert m.package == 2
    assert _coll(m.profile) == {("allgather", model): 447_232,
                                ("allreduce", model): 409_600,
                                ("allreduce", data): 447_232}
    wg = [c for c, lab in zip(m.profile.phases, m.labels) if lab == "weight-grad"]
    assert len(wg) == 1 and 0 < wg[0].overlap < 1
    # a package of 4: the groups follow
    m4 = astra.build(astra.parse_file(astra.DATA_DIR / name), workers=8, package=4)
    g4 = {DIM0: Group(size=4, stride=1), UPPER: Group(size=2, stride=4)}
    assert {k[1] for k in _coll(m4.profile)} == {g4[model], g4[data]}


def test_dlrm():
    m = astra.build(astra.parse_file(astra.DATA_DIR / "DLRM_HybridParallel.txt"), workers=8)
    p, lab = m.profile, m.labels
    assert m.workload.last_bottom == 4
    # embedding all-to-all forward and input-gradient, MLP all-reduce, every rank
    mlp = [13312, 524288, 524288, 16384, 1064960, 524288, 524288]
    assert _coll(p) == {("alltoall", ALL): 2 * 98304, ("allreduce", ALL): sum(mlp)}
    # forward: the all-to-all starts after the embedding's 300 ticks and runs alongside the
    # bottom MLP (1280 + 2560 + 2560 + 800); the top MLP (6400 + 2560 + 2560) waits for it
    assert lab[:3] == ["compute: forward, rows 0..4", "forward", "compute: forward, rows 5..7"]
    assert p.phases[0].seconds == pytest.approx(7500e-9) and p.phases[1].overlap == 0.96
    assert p.phases[2].seconds == pytest.approx(11520e-9)
    # backward: wg(7) ig(7) ... wg(1) ig(1) wg(0); the embedding's input-gradient compute is
    # never run; its all-to-all is issued after ig(5) = 19,584 of 32,358 ticks
    total = 13644 + 18714
    assert p.phases[3].seconds == pytest.approx(total * 1e-9)
    ig = p.phases[lab.index("input-grad")]
    assert ig.op == "alltoall" and ig.overlap == round((total - 19584) / total, 4)
    rem = [30566, 26214, 19174, 11974, 8902, 4550, 1094]   # after wg(7), wg(6), ..., wg(1)
    want = sum(b * r for b, r in zip(reversed(mlp), rem)) / sum(mlp) / total
    wg = p.phases[lab.index("weight-grad")]
    assert wg.overlap == round(want, 4)
    assert [c.overlap for c in p.collectives[1:]] == sorted([c.overlap for c in p.collectives[1:]],
                                                           reverse=True)


def test_customized_per_layer_policies():
    m = astra.build(astra.parse_file(astra.DATA_DIR / "sample_per_layer_parallel_HybridCustomized.txt"),
                    workers=8)
    assert [r.policy for r in m.workload.rows] == ["HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "DATA",
                                                   "MODEL", "MODEL", "HYBRID_MODEL_DATA"]
    # row 0 (data-model): fwd AG dim 0, ig skipped (first layer), wg AR higher dims
    # rows 1, 5 (model-data): AG and RS on the higher dims, AR dim 0; row 2 (data): AR all
    # rows 3, 4 (model): AG and RS over all ranks
    assert _coll(m.profile) == {
        ("allgather", DIM0): 37632, ("allgather", UPPER): 65536 + 65536,
        ("allgather", ALL): 147456 + 65536,
        ("reducescatter", UPPER): 65536 + 65536, ("reducescatter", ALL): 147456 + 65536,
        ("allreduce", UPPER): 37632, ("allreduce", DIM0): 65536 + 65536, ("allreduce", ALL): 65536}


def test_package_from_header_and_errors(tmp_path):
    text = (astra.DATA_DIR / "MLP_HybridParallel_Data_Model.txt").read_text()
    p = tmp_path / "dm.txt"
    p.write_text(text.replace("HYBRID_DATA_MODEL", "HYBRID_DATA_MODEL npus_per_package: 4", 1))
    m = astra.build(astra.parse_file(p), workers=8)
    assert m.package == 4 and "header" in m.package_source
    with pytest.raises(astra.AstraError, match="6 workers do not split into packages of 4"):
        astra.build(astra.parse_file(p), workers=6)
    assert astra.default_package(8) == 2 and astra.default_package(16) == 4
    assert astra.default_package(12) == 3 and astra.default_package(7) == 1


# ---------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------

def _cli(*args):
    return subprocess.run([sys.executable, "-m", "workloads", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_cli_import_prints_the_mapping():
    r = _cli("import", str(astra.DATA_DIR / "MLP_HybridParallel_Data_Model.txt"), "--workers", "8")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "packages of 2" in out
    assert "forward: allgather 447.232 kB on 4 groups of 2, stride 1: [0 1] [2 3] [4 5] [6 7]" in out
    assert "weight-grad: allreduce 447.232 kB on 2 groups of 4, stride 2: [0 2 4 6] [1 3 5 7]" in out
    # bytes each worker sends: AG on 2 ranks 1/2 M, AR on 2 ranks M, AR on 4 ranks 3/2 M
    assert re.search(r"forward\s+223\.616 kB sent per worker per iteration", out)
    assert re.search(r"input-grad\s+409\.600 kB sent per worker per iteration", out)
    assert re.search(r"weight-grad\s+670\.848 kB sent per worker per iteration", out)
    assert "not issued: line 3 (layer_64_2_mlp0) input-grad" in out
    r = _cli("import", str(astra.DATA_DIR / "DLRM_HybridParallel.txt"), "--package", "4")
    assert r.returncode == 0 and "packages of 4" in r.stdout and "alltoall" in r.stdout
    r = _cli("import", str(simai.DATA_DIR / "workload_ep_test.txt"))
    assert r.returncode == 0 and "sent per worker" in r.stdout


ROW = "a -1 5 ALLGATHER 64 5 ALLREDUCE 64 5 ALLREDUCE 64 5"


@pytest.mark.parametrize("text, want", [
    (f"MODEL\n1\na -1 5 ALLGATHER 64\n", "line 3 field 6 (input-gradient compute time): missing"),
    (f"MODEL\n1\n{ROW} 7\n", "line 3 field 13: unexpected: a MODEL row has 12 fields, this one has 13"),
    (f"MODEL\n1\n{ROW.replace('ALLGATHER', 'GATHER')}\n",
     "line 3 field 4 (forward comm type): unknown collective 'GATHER'"),
    (f"HYBRID_DATA_MODEL\n1\n{ROW.replace('ALLREDUCE 64 5 ALLREDUCE', 'ALLREDUCE -64 5 ALLREDUCE')}\n",
     "line 3 field 8 (input-gradient comm size): must be a non-negative whole number of bytes, got '-64'"),
    (f"MODEL\n1\n{ROW.replace('-1 5', '-1 fast')}\n", "line 3 field 3 (forward compute time): must be a number"),
    (f"HYBRID_CUSTOMIZED\n1\n{ROW} PIPELINE\n",
     "line 3 field 13 (layer parallelism policy): unknown layer policy 'PIPELINE'"),
    ("HYBRID_DLRM\n3\n" + f"{ROW}\n" * 3, "line 1 field 2 (last bottom-MLP layer)"),
    ("HYBRID_DLRM 2\n3\n" + f"{ROW}\n" * 3, "line 1 field 2 (last bottom-MLP layer): must be between 1 and 1"),
    ("HYBRID_MODEL_DATA\nsix\n", "line 2: expected the number of layer rows (>= 1), got 'six'"),
    (f"MODEL\n2\n{ROW}\n", "line 4: expected 2 layer rows (line 2), file ends after 1"),
    (f"MODEL\n1\n{ROW}\n{ROW}\n", "line 4: more layer rows than the 1 declared on line 2"),
    (f"MODEL tp: 2\n1\n{ROW}\n", "line 1 field 2: unexpected 'tp:'"),
    (f"MODEL\n1\n{ROW.replace('ALLGATHER', 'ALLREDUCEALLTOALL')}\n", "has no schema op"),
])
def test_malformed_file_one_line_exit_2(tmp_path, text, want):
    bad = tmp_path / "bad.txt"
    bad.write_text(text)
    r = _cli("import", str(bad))
    assert r.returncode == 2, r.stdout
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr
    assert lines[0].startswith("error: bad.txt line "), lines[0]
    assert want in lines[0], lines[0]


def test_cli_rejects_bad_package(tmp_path):
    r = _cli("import", str(astra.DATA_DIR / "MLP_ModelParallel.txt"), "--workers", "6", "--package", "4")
    assert r.returncode == 2
    assert r.stderr.strip() == ("error: MLP_ModelParallel.txt: 6 workers do not split into packages "
                                "of 4 (dimension 0); use a multiple of 4 workers or another package size")
    r = _cli("import", str(simai.DATA_DIR / "workload_ep_test.txt"), "--package", "2")
    assert r.returncode == 2 and "--package applies only" in r.stderr


def test_scenario_names_a_sample():
    rs = resolve(parse_scenario({
        "name": "s", "backend": "simulation",
        "cluster": {"racks": 1, "hosts_per_rack": 2, "host_link_gbps": 100, "uplink_gbps": 100},
        "jobs": [{"name": "d", "model": "simai:dlrm_hybridparallel", "workers": 2, "iterations": 1}]}))
    assert {c.op for c in rs.jobs[0].profile.collectives} == {"alltoall", "allreduce"}


@pytest.mark.parametrize("name", ["astra-dlrm", "astra-customized"])
def test_shipped_scenarios_simulate(name):
    from workloads.scenario import load_scenario
    rs = resolve(load_scenario(ROOT / "scenarios" / f"{name}.yaml"))
    pols = {astra.policy_of(astra.find_shipped(j.spec.model.split(":", 1)[1])) for j in rs.jobs}
    assert pols & {"HYBRID_DLRM", "HYBRID_CUSTOMIZED"}
    res = simulate(rs, None)
    for j in rs.jobs:
        times = res.iteration_times(j.name)
        assert len(times) == j.spec.iterations
        assert res.summary_by_job()[j.name]["slowdown_vs_isolated"] > 1.0   # the jobs contend
