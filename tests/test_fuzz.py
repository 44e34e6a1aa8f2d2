"""Fuzzing the three input parsers with hypothesis: the scenario loader, the SimAI/AICB importer
and the arrival-trace importer.  Every input either parses or raises the parser's one-line
error (ScenarioError and its SimAIError); nothing else escapes.  500 examples per parser run
in-process; a few hostile inputs go through the command-line entry points (exit 0, or exit 2
with one line on stderr, no traceback, nothing written)."""
from __future__ import annotations

import copy
import random
import string
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from simulation import arrivals as tr
from workloads import simai
from workloads.scenario import ScenarioError, load_scenario, resolve

from conftest import REPO, run_cli

EXAMPLES = 500
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))

# ----------------------------------------------------------------------------- values
NUMBERS = st.one_of(
    st.integers(min_value=-10**12, max_value=10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, -1, 2**31, 2**63, 10**30, 1e300, 0.5, 1e-12]),
)
TOKENS = st.one_of(
    NUMBERS.map(str),
    st.sampled_from(["", " ", "nan", "inf", "-inf", "1e6", "8388608.0", "4.0E+1", "0x10", "1_000",
                     "NONE", "ALLREDUCE", "ALLTOALL_EP", "ALLGATHER_DP_EP", "REDUCESCATTER",
                     "ALLREDUCEALLTOALL", "null", "-", "2020-04-01 08:00:05", "2020-13-45T99:00",
                     "\x00", "\ufeff", "é", "\u2028"]),
    st.text(alphabet=string.printable, max_size=12),
)
SMALL_INTS = st.integers(1, 64)
INT_TOKENS = st.one_of(SMALL_INTS.map(str), SMALL_INTS.map(lambda v: f"{v}.0"),
                       SMALL_INTS.map(lambda v: f"{v:.3e}"), TOKENS)
JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)


def one_line(e: BaseException) -> str:
    msg = str(e)
    assert len(msg.splitlines()) == 1, repr(msg)
    return msg


# ----------------------------------------------------------------------------- scenarios
BASE_SCENARIO = yaml.safe_load((REPO / "scenarios" / "pair-shared-spine.yaml").read_text())
BASE_SCENARIO["jobs"].append({"name": "jobC", "workers": 2, "iterations": 3, "model": "resnet50",
                              "placement": {"rule": "spread"}})
BASE_SCENARIO["cluster"]["gpus_per_host"] = 2


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


SCENARIO_PATHS = [p for p in _paths(BASE_SCENARIO) if p]
PLAUSIBLE = st.one_of(st.integers(0, 8), st.floats(0, 500), st.sampled_from(
    ["r0h0", "r1h1/1", "r2h0", "packed", "spread", "random", "allreduce", "alltoall", "sendrecv",
     "1GB", "25MB", "-1MB", "gpt2-1.5b", "simai:ep_test", "simai:nope", "H100", "simulation",
     [0], [0, 1], [], {"size": 2}, {"size": 3, "stride": 2}]))


@st.composite
def scenario_docs(draw):
    """Mostly valid scenarios with a few values replaced, keys dropped or added; sometimes
    raw text."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.one_of(st.text(max_size=200), st.binary(max_size=200)))
    doc = copy.deepcopy(BASE_SCENARIO)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(SCENARIO_PATHS))
        node = doc
        try:
            for k in path[:-1]:
                node = node[k]
            action = draw(st.integers(0, 3))
            if action == 0:
                del node[path[-1]]
            elif action == 1 and isinstance(node, dict):
                node[draw(st.text(max_size=8))] = draw(JSONISH)
            else:   # half the time a plausible value: the parser's deeper checks get reached
                node[path[-1]] = draw(st.one_of(JSONISH, PLAUSIBLE))
        except (KeyError, IndexError, TypeError):
            continue
    return yaml.safe_dump(doc)


@FUZZ
@given(doc=scenario_docs())
def test_fuzz_scenario_loader(tmp_path_factory, doc):
    p = tmp_path_factory.mktemp("sc", numbered=True) / "s.yaml"
    if isinstance(doc, bytes):
        p.write_bytes(doc)
    else:
        p.write_text(doc)
    try:
        resolve(load_scenario(p))
        event("parsed")
    except ScenarioError as e:
        one_line(e)
        event("refused")


# ----------------------------------------------------------------------------- SimAI
HEADER_KEYS = ["model_parallel_NPU_group:", "ep:", "pp:", "vpp:", "ga:", "all_gpus:", "pp_comm:",
               "pp_comm", "checkpoints:", "checkpoint_initiates:"]
POLICIES = ["HYBRID_TRANSFORMER_FWD_IN_BCKWD"] * 4 + ["MICRO", "DATA", "HYBRID_TRANSFORMER", "FOO", ""]
ROW_TOKENS = st.one_of(st.sampled_from(["0", "1", "-1", "100", "1e3", "2048.0", "NONE", "ALLREDUCE",
                                        "ALLTOALL_EP", "ALLGATHER_DP_EP", "REDUCESCATTER_EP",
                                        "BROADCAST"]), TOKENS)
SIMAI_SAMPLE = (simai.DATA_DIR / "workload_ep_test.txt").read_text().splitlines()


@st.composite
def simai_files(draw):
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.binary(max_size=300))
    if kind == 1:   # a real file with a few tokens replaced / lines dropped or duplicated
        lines = list(SIMAI_SAMPLE)
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(lines) - 1))
            op = draw(st.integers(0, 2))
            if op == 0:
                toks = lines[i].split() or [""]
                toks[draw(st.integers(0, len(toks) - 1))] = draw(TOKENS)
                lines[i] = "\t".join(toks)
            elif op == 1:
                del lines[i]
            else:
                lines.insert(i, lines[i])
            if not lines:
                break
        return "\n".join(lines) + "\n"
    head = [draw(st.sampled_from(POLICIES))]
    for _ in range(draw(st.integers(0, 8))):
        head += [draw(st.sampled_from(HEADER_KEYS)), draw(INT_TOKENS)]
    n = draw(st.integers(0, 5))
    count = draw(st.one_of(st.just(str(n)), st.integers(0, 8).map(str), st.just(f"{n}.0"), TOKENS))
    rows = []
    for _ in range(n):
        f = ["layer", "-1", "1", "NONE", "0", "1", "NONE", "0", "1", "ALLREDUCE", "1048576", "100"]
        for _ in range(draw(st.integers(0, 2))):
            f[draw(st.integers(0, 11))] = draw(ROW_TOKENS)
        if draw(st.integers(0, 15)) == 0:
            f = f[:draw(st.integers(0, 11))]
        rows.append("\t".join(f))
    return "\n".join([" ".join(head), count] + rows) + "\n"


@FUZZ
@given(text=simai_files(), workers=st.one_of(st.none(), st.integers(1, 4096)))
def test_fuzz_simai_importer(tmp_path_factory, text, workers):
    p = tmp_path_factory.mktemp("simai", numbered=True) / "w.txt"
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    try:
        wl = simai.parse_file(p)
    except ScenarioError as e:
        one_line(e)
        event("refused")
        return
    event("parsed" + (" with a warning" if wl.warnings else ""))
    assert wl.rows and all(one_line(Exception(w)) for w in wl.warnings)
    try:
        prof = simai.to_profile(wl, workers)
    except ScenarioError as e:
        one_line(e)
        return
    simai.describe(wl, workers)
    assert prof.phases


# ----------------------------------------------------------------------------- arrival traces
COLUMN_NAMES = ["submit_time", "creation_time", "start_time", "end_time", "deletion_time",
                "duration", "gpu_num", "num_gpu", "plan_gpu", "gpu_milli", "job_id", "arrival_ms",
                "time (min)", "x", ""]


@st.composite
def trace_files(draw):
    if draw(st.integers(0, 9)) == 0:
        return draw(st.one_of(st.text(max_size=300), st.binary(max_size=300))), ""
    header = [draw(st.sampled_from(COLUMN_NAMES[:3]))] if draw(st.booleans()) else []
    header += draw(st.lists(st.sampled_from(COLUMN_NAMES), min_size=1 - len(header), max_size=5))
    header = list(dict.fromkeys(header)) if draw(st.integers(0, 5)) else header
    sep = draw(st.sampled_from([",", ";", "\t"]))
    cells = st.one_of(st.integers(0, 10**6).map(str), st.floats(0, 64).map(lambda v: f"{v:.2f}"),
                      st.sampled_from(["", "0", "1", "8", "0.5", "2020-04-01 08:00:05"]), TOKENS)
    if draw(st.booleans()):   # a clean numeric trace with a few holes
        cells = st.one_of(st.integers(0, 10**6).map(str), st.integers(0, 16).map(str),
                          st.sampled_from(["", "0.5", "1.0"]))
    rows = []
    for _ in range(draw(st.integers(0, 12))):
        n = len(header) + draw(st.integers(-1, 1)) * (draw(st.integers(0, 6)) == 0)
        rows.append(sep.join(draw(cells).replace(sep, "").replace("\n", "")
                             .replace("\r", "").replace('"', "") for _ in range(max(n, 0))))
    cols = draw(st.one_of(st.just(""), st.sampled_from([
        "start=submit_time", "start=x,gpus=gpu_num/100", "start=creation_time,end=deletion_time",
        "gpus=nope", "start=", "start=x/0", "start=x,start=x"])))
    return sep.join(header) + "\n" + "\n".join(rows) + "\n", cols


@FUZZ
@given(case=trace_files(), unit=st.sampled_from([None, "s", "ms", "h"]),
       n=st.integers(1, 6), mean=st.one_of(st.none(), st.floats(0.001, 100)))
def test_fuzz_arrival_importer(tmp_path_factory, case, unit, n, mean):
    text, cols = case
    p = tmp_path_factory.mktemp("trace", numbered=True) / "t.csv"
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    try:
        t = tr.read_trace(p, cols, unit)
        one_line(Exception(t.summary()))
        s = tr.sample(t, n, random.Random(0), capacity_gpus=64, mean_interarrival_s=mean)
    except ScenarioError as e:
        one_line(e)
        event("refused")
        return
    event("sampled")
    assert len(s.times) == n and s.times == sorted(s.times) and s.times[0] == 0
    assert s.sizes is None or (len(s.sizes) == n and all(g >= 1 for g in s.sizes))


# ----------------------------------------------------------------------------- CLI cases
HOSTILE = [
    b"\xff\xfe\x00garbage\xd6\x80",                          # not UTF-8
    b"[" * 5000 + b"]" * 5000,                                # deep nesting
    b"name: x\ncluster: {racks: 1e12, hosts_per_rack: 1, host_link_gbps: 1, uplink_gbps: 1}\n",
    b"HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1e400\n1\n",
    b"submit_time,gpus\n1e400,1\n",
]


def _check_cli(r, made: Path = None):
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode in (0, 2), (r.returncode, r.stderr)
    if r.returncode == 2:
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        if made is not None:
            assert not made.exists() and not list(made.parent.glob(made.name + "*"))


@pytest.mark.parametrize("i", range(len(HOSTILE)))
def test_cli_never_tracebacks(tmp_path, i):
    f = tmp_path / "in.txt"
    f.write_bytes(HOSTILE[i])
    _check_cli(run_cli("workloads", "validate", str(f), timeout=60))
    _check_cli(run_cli("workloads", "import", str(f), timeout=60))
    out = tmp_path / "out.yaml"
    _check_cli(run_cli("simulation", "generate", str(out), "--racks", "2", "--hosts-per-rack", "2",
                       "--jobs", "2", "--arrivals", f"csv:{f}", timeout=60), made=out)


@pytest.mark.parametrize("args", [["--racks", "0"], ["--spines", "0"], ["--jobs", "-3"],
                                  ["--racks", "100000", "--hosts-per-rack", "100000"],
                                  ["--arrivals", "nope"], ["--arrival-columns", "start=x"]])
def test_cli_generate_bad_options(tmp_path, args):
    out = tmp_path / "g.yaml"
    r = run_cli("simulation", "generate", str(out), *args, timeout=60)
    assert r.returncode == 2
    _check_cli(r, made=out)
