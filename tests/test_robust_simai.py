"""SimAI/AICB import as lenient as the files are: every shipped file plus generated variants
(integral floats and scientific notation where integers are expected, header row counts that
disagree with the rows present, no count line), one warning line, and the MoE mapping
(ep groups, expert all-to-all rows, pp_comm x ga x vpp, the pipeline bubble)."""
from __future__ import annotations

import pytest

from workloads import simai
from workloads.scenario import ScenarioError

from conftest import run_cli

FILES = simai.shipped()


def _float_ints(text: str) -> str:
    """Every integer of the header written as a float (as some MoE files do), every
    dependency and compute time of the rows in scientific notation."""
    head, count, *rows = text.splitlines()
    toks = head.split()
    for i in range(1, len(toks)):
        key = toks[i - 1].rstrip(":")
        if key in ("model_parallel_NPU_group", "ep", "pp", "vpp", "ga", "all_gpus"):
            toks[i] = f"{int(toks[i])}.0"
        elif key == "pp_comm":
            toks[i] = f"{int(toks[i]):.10e}"
    head = " ".join(toks)
    out = []
    for r in rows:
        f = r.split()
        if len(f) == 12:
            f[1] = f"{int(f[1])}.0"
            f[2] = f"{float(f[2]):e}"
        out.append("\t".join(f))
    return "\n".join([head, f"{int(count)}.0"] + out) + "\n"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_shipped_file_and_its_variants(tmp_path, path):
    base = simai.parse_file(path)
    assert not base.warnings
    ref = simai.summarize(simai.to_profile(base))
    # integral floats / scientific notation: the same workload
    v = tmp_path / path.name
    v.write_text(_float_ints(path.read_text()))
    wl = simai.parse_file(v)
    assert not wl.warnings
    assert (wl.tp, wl.ep, wl.pp, wl.vpp, wl.ga, wl.all_gpus, wl.pp_comm) == \
        (base.tp, base.ep, base.pp, base.vpp, base.ga, base.all_gpus, base.pp_comm)
    got = simai.summarize(simai.to_profile(wl))
    assert got["bytes"] == pytest.approx(ref["bytes"]) and got["compute_s"] == pytest.approx(ref["compute_s"])
    assert (got["phases"], got["collectives"]) == (ref["phases"], ref["collectives"])
    # the header's count disagrees with the rows present: the rows present, one warning
    lines = path.read_text().splitlines()
    n = len([l for l in lines[2:] if l.strip()])
    for declared, keep in ((n + 7, n), (max(n - 1, 1), n), (n, max(n // 2, 1))):
        m = tmp_path / f"m{declared}_{keep}.txt"
        m.write_text("\n".join([lines[0], str(declared)] + lines[2:2 + keep]) + "\n")
        wl = simai.parse_file(m)
        assert len(wl.rows) == keep and wl.declared_rows == declared
        if declared == keep:
            assert not wl.warnings
        else:
            assert wl.warnings == [f"{m.name}: header declares {declared} layer rows (line 2) but "
                                   f"{keep} are present; imported the {keep} present"]
        simai.to_profile(wl)


def test_no_count_line_and_no_rows(tmp_path):
    lines = (simai.DATA_DIR / "microAllReduce.txt").read_text().splitlines()
    p = tmp_path / "nocount.txt"
    p.write_text("\n".join([lines[0]] + lines[2:]) + "\n")
    wl = simai.parse_file(p)
    assert len(wl.rows) == 2 and wl.declared_rows is None and len(wl.warnings) == 1
    p.write_text(lines[0] + "\n5\n\n")
    with pytest.raises(ScenarioError, match="line 4: no layer row"):
        simai.parse_file(p)


@pytest.mark.parametrize("value, ok", [("8388608.0", 8388608), ("8.388608e6", 8388608),
                                       ("2.5", None), ("1e400", None), ("nan", None), ("0x10", None)])
def test_integer_fields(tmp_path, value, ok):
    p = tmp_path / "h.txt"
    p.write_text(f"HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 pp: 2.0 pp_comm: {value}\n"
                 "1\nl -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 64 100\n")
    if ok is None:
        with pytest.raises(ScenarioError, match="pp_comm must be an integer"):
            simai.parse_file(p)
    else:
        wl = simai.parse_file(p)
        assert wl.pp == 2 and wl.pp_comm == ok


def test_cli_import_warns_once(tmp_path):
    lines = (simai.DATA_DIR / "workload_ep_test.txt").read_text().splitlines()
    p = tmp_path / "ep.txt"
    p.write_text("\n".join([lines[0].replace("all_gpus: 32", "all_gpus: 32.0"), "50"] + lines[2:]) + "\n")
    r = run_cli("workloads", "import", str(p), timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip().splitlines() == [
        "warning: ep.txt: header declares 50 layer rows (line 2) but 43 are present; imported the 43 present"]
    assert "EP=4" in r.stdout and "alltoall" in r.stdout


def test_moe_mapping_analytical():
    wl = simai.parse_file(simai.DATA_DIR / "workload_analytical.txt")
    assert (wl.tp, wl.ep, wl.pp, wl.vpp, wl.ga, wl.all_gpus, wl.pp_comm) == (2, 16, 12, 8, 24, 9216, 50331648)
    prof = simai.to_profile(wl)
    dp = 9216 // (2 * 12)
    # pipeline: every micro-batch crosses each virtual stage boundary, both directions
    sr = [c for c in prof.collectives if c.op == "sendrecv"]
    assert [c.bytes for c in sr] == [24 * 8 * 50331648] * 2
    assert all(c.group.size == 12 and c.group.stride == 2 * dp for c in sr)
    # expert all-to-all rows: the EP group (16 consecutive DP ranks, stride TP)
    ep_rows = [r for r in wl.rows if r.fwd and r.fwd.scope == "ep"]
    assert ep_rows and all(r.fwd.op == "alltoall" for r in ep_rows)
    a2a = {(c.group.size, c.group.stride) for c in prof.collectives if c.op == "alltoall"}
    assert (16, 2) in a2a and (2, 1) in a2a
    ep_bytes = sum(r.fwd.bytes for r in ep_rows) + sum(r.ig.bytes for r in wl.rows if r.ig and r.ig.scope == "ep")
    assert sum(c.bytes for c in prof.collectives if (c.group.size, c.group.stride) == (16, 2)) == ep_bytes
    # the experts' own DP groups: DP / EP ranks, stride TP * EP
    assert any(c.group.size == dp // 16 and c.group.stride == 32 for c in prof.collectives)
    # the pipeline bubble: (pp-1)/(ga*vpp) of the compute, as its own compute phase
    comp = [p.seconds for p in prof.phases if p.op == "compute"]
    assert comp[-1] == pytest.approx((comp[0] + comp[1]) * 11 / (24 * 8))


def test_aiob_kernel_timings_shipped():
    f = simai.DATA_DIR / "aiob" / "gpu_compute_timing.txt"
    kernels, cur = {}, None
    for line in f.read_text().splitlines()[1:]:
        if not line.startswith(" ") and line.endswith(":"):
            cur = kernels.setdefault(line[:-1], {})
        elif line.strip():
            k, v = line.split(":")
            cur[k.strip()] = float(v)
    assert len(kernels) == 14 and "Emb" in kernels
    assert all(t["time_gpu_min"] <= t["time_gpu_avg"] <= t["time_gpu_max"] for t in kernels.values())
    assert f not in simai.shipped()     # not a workload description
