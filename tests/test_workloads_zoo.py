"""Model zoo: sane bytes and compute times, hybrid parallelism, errors."""
import pytest

from workloads import zoo
from workloads.flows import collective_flows
from workloads.scenario import Collective, Compute


def dp_allreduce(p):
    return [c for c in p.collectives if c.op == "allreduce" and c.overlap > 0]


def test_list_models_covers_the_brief():
    names = zoo.list_models()
    for m in ("resnet50", "vgg16", "bert-large", "gpt2-1.5b", "gpt3-13b", "gpt3-175b",
              "llama-7b", "mixtral-8x7b", "simai:gpt7b_64g"):
        assert m in names


@pytest.mark.parametrize("model, params, grad_mb", [
    ("resnet50", 25.6e6, 51.1), ("vgg16", 138e6, 276.7), ("bert-large", 340e6, 680),
    ("gpt2-1.5b", 1.542e9, 3084)])
def test_data_parallel_gradient_bytes(model, params, grad_mb):
    e = zoo.MODELS[model]
    assert e.params == pytest.approx(params, rel=0.01)
    p = zoo.profile_for(model, 4, "A100")
    (ar,) = p.collectives
    assert ar.op == "allreduce" and ar.group.size is None or ar.group.size == 4
    assert ar.bytes / 1e6 == pytest.approx(grad_mb, rel=0.01)     # fp16/bf16 = 2 bytes
    assert 0 < ar.overlap < 1
    p32 = zoo.profile_for(model + " grad=fp32", 4, "A100")
    assert p32.collectives[0].bytes == pytest.approx(2 * ar.bytes)


def test_resnet50_matches_measured_throughput():
    p = zoo.profile_for("resnet50", 8, "A100")
    assert p.compute_s == pytest.approx(256 / 2470, rel=1e-6)          # 2,470 img/s
    h = zoo.profile_for("resnet50", 8, "H100")
    assert p.compute_s / h.compute_s == pytest.approx(14.4 / 7.8)
    assert 0.7 < dp_allreduce(p)[0].overlap < 0.9                        # most params late


@pytest.mark.parametrize("model", sorted(zoo.MODELS))
def test_compute_times_sane(model):
    e = zoo.MODELS[model]
    w = e.tp * e.pp * e.ep * 2
    a = zoo.profile_for(model, w, "A100")
    h = zoo.profile_for(model, w, "H100")
    assert 0.01 < a.compute_s < 60
    assert 1.5 < a.compute_s / h.compute_s < 4.0                      # H100 faster, not absurdly
    # implied model FLOP/s per GPU within physical limits (< 70 % of peak)
    flops = e.batch * e.flops_per_sample / (e.tp * e.pp)
    assert flops / a.compute_s < 0.7 * zoo.PEAK_FLOPS["A100"]
    assert isinstance(a.phases[0], Compute) and any(isinstance(x, Collective) for x in a.phases)
    for c in a.collectives:
        collective_flows(c, w)  # groups tile the job


def test_llm_mfu_derivation():
    assert zoo._MFU["A100"] == pytest.approx(0.437, abs=0.002)
    p = zoo.profile_for("gpt2-1.5b", 2, "A100")
    assert p.compute_s == pytest.approx(6 * 1542e6 * 8 * 1024 / (312e12 * zoo._MFU["A100"]))


def test_hybrid_tp_dp_groups():
    p = zoo.profile_for("gpt3-13b", 32, "A100")
    tp = [c for c in p.collectives if c.group.size == 8 and c.group.stride == 1]
    assert len(tp) == 2 and all(c.overlap == 0 for c in tp)
    (dp,) = dp_allreduce(p)
    assert (dp.group.size, dp.group.stride) == (4, 8)
    assert dp.bytes == pytest.approx(13.0e9 / 8 * 2)
    assert dp.overlap == pytest.approx(0.5 / 16)
    with pytest.raises(ValueError, match="multiple of 8"):
        zoo.profile_for("gpt3-13b", 12, "A100")
    p4 = zoo.profile_for("gpt3-13b tp=4", 12, "A100")
    assert p4.compute_s == pytest.approx(2 * p.compute_s)


def test_pipeline_model():
    p = zoo.profile_for("gpt3-175b", 128, "A100")
    sr = [c for c in p.collectives if c.op == "sendrecv"]
    assert len(sr) == 2 and all((c.group.size, c.group.stride) == (8, 16) for c in sr)
    (dp,) = dp_allreduce(p)
    assert dp.bytes == pytest.approx(175e9 / 64 * 2)


def test_moe_alltoall_and_expert_groups():
    p = zoo.profile_for("mixtral-8x7b", 32, "A100")
    a2a = [c for c in p.collectives if c.op == "alltoall"]
    assert len(a2a) == 2 and all((c.group.size, c.group.stride) == (8, 2) for c in a2a)
    grads = dp_allreduce(p)
    assert {(c.group.size, c.group.stride) for c in grads} == {(16, 2), (2, 16)}
    total = sum(c.bytes * (2 if c.group.stride == 2 else 16) for c in grads)  # x ranks sharing
    assert total / 2 == pytest.approx(46.7e9, rel=0.01)                      # all params, 2 B each
    with pytest.raises(ValueError, match="not divisible by ep=3"):
        zoo.profile_for("mixtral-8x7b ep=3", 12, "A100")


def test_unknown_model_and_gpu():
    with pytest.raises(KeyError) as e:
        zoo.profile_for("alexnet", 2, "A100")
    assert "resnet50" in e.value.args[0] and "simai:gpt7b_64g" in e.value.args[0]
    with pytest.raises(KeyError, match="V100"):
        zoo.profile_for("resnet50", 2, "V100")
    with pytest.raises(ValueError, match="unknown model option"):
        zoo.profile_for("resnet50 colour=red", 2, "A100")
    with pytest.raises(ValueError, match="data-parallel only"):
        zoo.profile_for("resnet50 tp=2", 2, "A100")


def test_simai_via_zoo():
    p = zoo.profile_for("simai:gpt7b_64g", 16, "A100")
    assert p.collectives
    a = zoo.profile_for("simai:llama7b_megatron_a100", 4, "A100")
    h = zoo.profile_for("simai:llama7b_megatron_a100", 4, "H100")
    assert h.compute_s < a.compute_s
    with pytest.raises(KeyError, match="unknown SimAI workload"):
        zoo.profile_for("simai:nope", 4, "A100")
