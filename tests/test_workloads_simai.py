"""SimAI/AICB importer: every shipped file imports, malformed files give one clear line."""
import subprocess
import sys
from pathlib import Path

import pytest

from workloads import simai
from workloads.flows import collective_flows
from workloads.scenario import Collective, Compute, ScenarioError

ROOT = Path(__file__).resolve().parents[1]
FILES = simai.shipped()


def test_shipped_set_is_complete():
    names = {f.name for f in FILES}
    for required in ("workload_gpt7b_64g.txt", "workload_gpt13b_128g.txt", "workload_ep_test.txt",
                     "microAllReduce.txt", "aicb_micro_all_reduce.txt",
                     "aicb_L7B-M1-C04_Llama7B_megatron_tp2_pp1_mbs1_A100.txt",
                     "aicb_L7B-D1-C02_Llama7B_deepspeed_zero3_A100.txt"):
        assert required in names
    assert (simai.DATA_DIR / "PROVENANCE.md").is_file()
    for alias, fname in simai.ALIASES.items():
        assert (simai.DATA_DIR / fname).is_file(), alias


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_shipped_file_imports(path):
    wl = simai.parse_file(path)
    declared = int(path.read_text().splitlines()[1])
    assert len(wl.rows) == declared
    prof = simai.to_profile(wl)
    assert isinstance(prof.phases[0], Compute)
    # total bytes are preserved per collective type (NONE slots and zero sizes dropped)
    want = {}
    for r in wl.rows:
        for c in (r.fwd, r.ig, r.wg):
            if c is not None and c.bytes > 0:
                want[c.op] = want.get(c.op, 0.0) + c.bytes
    pp = 2 * wl.ga * wl.vpp * wl.pp_comm if wl.pp > 1 else 0
    if pp:
        want["sendrecv"] = pp
    assert simai.summarize(prof)["bytes"] == pytest.approx(want)
    # compute: ticks are nanoseconds
    ticks = sum(float(l.split()[i]) for l in path.read_text().splitlines()[2:] if l.strip()
                for i in (2, 5, 8))
    # plus the pipeline bubble, (pp-1)/(ga*vpp) of it
    assert prof.compute_s == pytest.approx(ticks * 1e-9 * (1 + wl.bubble_fraction), rel=1e-9, abs=1e-12)
    for c in prof.collectives:
        assert 0.0 <= c.overlap <= 1.0
        collective_flows(c, wl.world())  # groups tile the job


def test_gpt7b_groups_and_times():
    wl = simai.parse_file(simai.DATA_DIR / "workload_gpt7b_64g.txt")
    assert (wl.tp, wl.pp, wl.ep, wl.ga, wl.all_gpus) == (8, 1, 1, 8, 64)
    prof = simai.to_profile(wl)
    tp = [c for c in prof.collectives if c.group.size == 8 and c.group.stride == 1]
    dp = [c for c in prof.collectives if c.group.stride == 8]
    assert tp and dp
    # the distributed-optimizer gradient reduce-scatter is issued at the very end (row 0)
    assert dp[0].op == "reducescatter" and dp[0].bytes == 3058696192 and dp[0].overlap == 0.0


def test_aicb_a100_compute_in_seconds():
    prof = simai.import_file(simai.DATA_DIR / "aicb_G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1_A100.txt")
    # 40 layers x (attention 752,000 + mlp 750,000 ns) x 3 passes is most of it: ~0.2 s
    assert 0.15 < prof.compute_s < 0.3


def test_pipeline_and_expert_groups():
    prof = simai.import_file(simai.DATA_DIR / "workload_gpt13b_128g.txt")
    sr = [c for c in prof.collectives if c.op == "sendrecv"]
    assert len(sr) == 2 and all(c.group.size == 2 and c.group.stride == 64 for c in sr)
    assert sr[0].bytes == 16 * 20 * 2621440     # ga x vpp micro-batch chunks of pp_comm
    ep = simai.import_file(simai.DATA_DIR / "workload_ep_test.txt")
    a2a = {(c.group.size, c.group.stride) for c in ep.collectives if c.op == "alltoall"}
    assert a2a == {(4, 1), (4, 4)}          # TP group and EP group
    dp_ep = [c for c in ep.collectives if c.group.stride == 16]
    assert dp_ep and all(c.group.size == 2 for c in dp_ep)   # DP=8 / EP=4
    assert all(0 < c.overlap < 1 for c in dp_ep)


def test_rescaling_to_fewer_workers():
    wl = simai.parse_file(simai.DATA_DIR / "workload_gpt7b_64g.txt")
    prof = simai.to_profile(wl, workers=16)
    assert {c.group.size for c in prof.collectives if c.group.stride == 8} == {2}
    with pytest.raises(simai.SimAIError, match="multiple of 8"):
        simai.to_profile(wl, workers=12)


def test_zero3_tp1_gathers_go_to_dp():
    prof = simai.import_file(simai.DATA_DIR / "aicb_L7B-D1-C02_Llama7B_deepspeed_zero3_A100.txt", workers=4)
    assert all(c.group.size == 4 for c in prof.collectives)
    assert {c.op for c in prof.collectives} == {"allgather", "reducescatter"}


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_truncated_row_is_one_clear_line(tmp_path):
    lines = (simai.DATA_DIR / "workload_gpt7b_64g.txt").read_text().splitlines()
    p = _write(tmp_path, "workload_gpt7b_64g.txt", "\n".join(lines[:56] + ["attention_row\t-1\t1\tNONE\t0"]) + "\n")
    with pytest.raises(ScenarioError) as e:
        simai.parse_file(p)
    assert str(e.value) == "workload_gpt7b_64g.txt line 57: expected 12 fields, got 5"


def test_file_ending_early_imports_the_rows_present(tmp_path):
    lines = (simai.DATA_DIR / "workload_gpt7b_64g.txt").read_text().splitlines()
    p = _write(tmp_path, "cut.txt", "\n".join(lines[:100]) + "\n")
    wl = simai.parse_file(p)
    assert len(wl.rows) == 98 and wl.warnings == [
        "cut.txt: header declares 1058 layer rows (line 2) but 98 are present; imported the 98 present"]


@pytest.mark.parametrize("text, where", [
    ("", "line 1: empty header"),
    ("FOO model_parallel_NPU_group: 1\n1\n", "line 1: unknown parallelism policy 'FOO'"),
    ("MICRO model_parallel_NPU_group: x\n1\n", "line 1: model_parallel_NPU_group must be an integer"),
    ("MICRO\n", "line 2: expected the number of layer rows"),
    ("MICRO\nten\n", "line 2: expected the number of layer rows, got 'ten'"),
    ("MICRO\n1\nx -1 1 NONE 0 1 NONE 0 1 ALLREDUCE -5 1\n", "line 3: weight-grad comm size must be a non-negative"),
    ("MICRO\n1\nx -1 1 NONE 0 1 NONE 0 1 SHUFFLE 5 1\n", "line 3: unknown weight-grad comm type 'SHUFFLE'"),
    ("MICRO\n1\nx -1 abc NONE 0 1 NONE 0 1 NONE 0 1\n", "line 3: forward compute time must be a number"),
    ("MICRO\n1\n", "no layer row"),
    ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 pp: 2\n1\n", "pp_comm"),
])
def test_malformed_files(tmp_path, text, where):
    p = _write(tmp_path, "bad.txt", text)
    msg = str(pytest.raises(ScenarioError, simai.parse_file, p).value)
    assert msg.startswith("bad.txt") and where in msg and "\n" not in msg


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "workloads", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_cli_import_and_error(tmp_path):
    r = _cli("import", str(simai.DATA_DIR / "workload_ep_test.txt"))
    assert r.returncode == 0, r.stderr
    assert "compute" in r.stdout and "alltoall" in r.stdout and "TP=4" in r.stdout
    lines = (simai.DATA_DIR / "workload_gpt7b_64g.txt").read_text().splitlines()
    bad = _write(tmp_path, "workload_gpt7b_64g.txt", "\n".join(lines[:56] + ["a -1 1 NONE 0"]))
    r = _cli("import", str(bad))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == ["error: workload_gpt7b_64g.txt line 57: expected 12 fields, got 5"]
    assert "Traceback" not in r.stderr
