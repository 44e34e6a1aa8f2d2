"""Model zoo: per-iteration profiles of well-known training jobs, by model name.

``profile_for(model, workers, gpu)`` is what ``scenario.resolve`` calls for a job that names
``model:`` instead of giving a ``profile:``.  A model string is a zoo name, optionally
followed by ``key=value`` overrides separated by spaces:

    resnet50                 data-parallel ring all-reduce of the gradients
    gpt3-13b tp=4            override the tensor-parallel degree
    mixtral-8x7b ep=4        override the expert-parallel degree
    bert-large grad=fp32     all-reduce fp32 gradients instead of fp16/bf16
    simai:gpt7b_64g          a profile imported from a shipped SimAI/AICB file
    simai:path/to/file.txt   ... or from any SimAI file

How the numbers are derived (sources in each entry and in docs/schema.md):

* gradient bytes = parameters held by a rank x bytes per gradient (2: fp16/bf16 by default,
  as in mixed-precision recipes that reduce half-precision gradients; ``grad=fp32`` for 4).
* compute per iteration and GPU = training FLOPs of the GPU's share of the batch / achieved
  FLOP/s.  Training FLOPs: 6 x (active) parameters x tokens for transformers (Kaplan et al.
  2020, attention-score FLOPs ignored), 3 passes x 2 FLOP/MAC x MACs per image for CNNs.
  Achieved FLOP/s: from a measured throughput where one is published (ResNet-50, BERT-large
  on A100), otherwise peak dense FP16/BF16 x a model-FLOPs-utilisation (MFU) taken from a
  published large run on that GPU (see ``_MFU``).
* one iteration = one optimizer step; forward is 1/3 of the compute, backward 2/3.
* data-parallel gradient all-reduce overlaps the backward pass: ``overlap`` = byte-weighted
  mean share of the backward pass still to run when a gradient becomes ready (computed
  from per-stage parameter/MAC tables for the CNNs; 1/2 for uniform transformer stacks),
  divided by the number of micro-batches when gradients are accumulated (only the last
  micro-batch's backward can hide the reduction).
* rank layout: tensor-parallel (TP) fastest, then data-parallel (DP), then pipeline stage;
  TP groups Group(tp, 1), DP groups Group(dp, tp), pipeline Group(pp, tp*dp), expert-parallel
  groups Group(ep, tp) (ep consecutive DP ranks), experts' DP groups Group(dp/ep, tp*ep).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from .profile import Collective, Compute, Group, Profile

# Peak dense FP16/BF16 tensor-core FLOP/s (SXM parts).  NVIDIA A100 datasheet: 312 TFLOPS;
# NVIDIA H100 datasheet: 1,979 TFLOPS with sparsity, i.e. 989.4 dense.
PEAK_FLOPS: Dict[str, float] = {"A100": 312e12, "H100": 989.4e12}

# Model-FLOPs utilisation of large transformer training runs (6*N*tokens / time / peak):
#  A100: LLaMA-7B, Touvron et al. 2023 ("LLaMA: Open and Efficient Foundation Language
#        Models"), Table 15: 82,432 A100-80GB GPU-hours for 1.0T tokens -> 3,370 tokens/s/GPU
#        -> 6 * 6.74e9 * 3370 / 312e12 = 0.437.
#  H100: Llama 3, Dubey et al. 2024 ("The Llama 3 Herd of Models"), Table 4: BF16 MFU
#        38-43 % on 8k-16k H100s; we take 0.40.
_MFU: Dict[str, float] = {"A100": 6 * 6.74e9 * (1.0e12 / (82_432 * 3600)) / 312e12, "H100": 0.40}

# H100/A100 speed-up for CNN training: MLPerf Training v3.0 (2023) ResNet-50, two Dell
# submissions with 16 GPUs each: H100-SXM5-80GB 7.8 min vs A100-SXM-80GB 14.4 min.
_CNN_H100_SPEEDUP = 14.4 / 7.8

_GRAD_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}


@dataclass(frozen=True)
class ModelEntry:
    name: str
    params: float                  # total parameters
    params_source: str
    kind: str                      # 'cnn' | 'transformer' | 'moe'
    batch: int                     # samples (images / sequences) per DP replica per iteration
    batch_note: str
    flops_per_sample: float        # training FLOPs per sample (whole model)
    achieved: Dict[str, float]     # achieved model FLOP/s per GPU, by GPU class
    compute_source: str
    seq_len: int = 0
    layers: int = 0
    hidden: int = 0
    tp: int = 1
    pp: int = 1
    ep: int = 1
    microbatch: int = 0            # sequences per micro-batch (0: the whole batch at once)
    active_params: float = 0.0     # MoE: parameters used per token
    expert_params: float = 0.0     # MoE: parameters inside the experts
    experts: int = 0
    top_k: int = 0
    stages: Tuple[Tuple[float, float], ...] = ()   # CNN: (params, MACs) per stage, input first
    parallel_note: str = "data parallel: ring all-reduce of the gradients"

    @property
    def micro_batches(self) -> int:
        return max(1, self.batch // self.microbatch) if self.microbatch else 1


def _overlap_from_stages(stages: Sequence[Tuple[float, float]]) -> float:
    """Byte-weighted mean share of the backward pass still to run when a stage's gradients
    are ready.  Backward runs the stages in reverse; backward cost of a stage ~ its MACs; a
    stage's gradients become ready, on average, half-way through its own backward."""
    total_macs = sum(m for _, m in stages)
    total_params = sum(p for p, _ in stages)
    done = 0.0
    acc = 0.0
    for p, m in reversed(stages):
        mid = done + m / 2
        acc += p * (1 - mid / total_macs)
        done += m
    return acc / total_params


def _lm_flops(active_params: float, seq: int) -> float:
    return 6.0 * active_params * seq


def _lm_achieved(mfu_a100: Optional[float] = None) -> Dict[str, float]:
    a = PEAK_FLOPS["A100"] * (mfu_a100 if mfu_a100 is not None else _MFU["A100"])
    return {"A100": a, "H100": PEAK_FLOPS["H100"] * _MFU["H100"]}


# --- CNN stage tables (params, MACs per 224x224 image), computed from the architectures ----
# ResNet-50 v1.5 (He et al. 2016, Table 1; v1.5 puts the stride on the 3x3 conv):
#   conv1, conv2_x, conv3_x, conv4_x, conv5_x, fc.  Totals 25.56 M params, 4.11 GMAC
#   (torchvision's ResNet50 documentation lists 25,557,032 params and 4.09 GFLOPS(MAC)).
_RESNET50_STAGES = ((9.4e3, 118e6), (215.8e3, 680e6), (1.22e6, 1.03e9), (7.10e6, 1.47e9),
                    (14.96e6, 0.81e9), (2.05e6, 2.05e6))
# VGG-16, configuration D (Simonyan & Zisserman 2015, Tables 1-2: 138 M params):
#   five conv blocks then the three FC layers.  Totals 138.4 M params, 15.47 GMAC.
_VGG16_STAGES = ((38.7e3, 1.936e9), (221.2e3, 2.775e9), (1.475e6, 4.624e9), (5.900e6, 4.624e9),
                 (7.079e6, 1.387e9), (123.64e6, 123.6e6))

_RESNET_A100_IMG_S = 2470.0   # NVIDIA DeepLearningExamples, PyTorch ResNet50 v1.5 README,
#                               DGX A100 80GB, 1 GPU, mixed precision, batch 256 (21.03 NGC)
_RESNET_MACS = sum(m for _, m in _RESNET50_STAGES)
_CNN_ACHIEVED_A100 = _RESNET_A100_IMG_S * 6 * _RESNET_MACS
_CNN_ACHIEVED = {"A100": _CNN_ACHIEVED_A100, "H100": _CNN_ACHIEVED_A100 * _CNN_H100_SPEEDUP}

_BERT_PARAMS = 340e6
_BERT_A100_SEQ_S = 580.0      # NVIDIA DeepLearningExamples, PyTorch BERT README, pre-training
#                               phase 1 (seq 128), DGX A100 80GB, 1 GPU, mixed precision,
#                               batch 256/GPU (pytorch 21.11 NGC)
_BERT_ACHIEVED_A100 = _BERT_A100_SEQ_S * _lm_flops(_BERT_PARAMS, 128)
_LLM_H100_SPEEDUP = (PEAK_FLOPS["H100"] * _MFU["H100"]) / (PEAK_FLOPS["A100"] * _MFU["A100"])

MODELS: Dict[str, ModelEntry] = {}


def _add(e: ModelEntry) -> None:
    MODELS[e.name] = e


_add(ModelEntry(
    name="resnet50", kind="cnn",
    params=sum(p for p, _ in _RESNET50_STAGES),
    params_source="He et al. 2016, 'Deep Residual Learning for Image Recognition' "
                  "(25.6 M parameters; torchvision: 25,557,032)",
    batch=256, batch_note="256 images/GPU (NVIDIA's A100 mixed-precision recipe)",
    flops_per_sample=6 * _RESNET_MACS, achieved=_CNN_ACHIEVED, stages=_RESNET50_STAGES,
    compute_source="A100: 2,470 img/s measured (NVIDIA DeepLearningExamples RN50 v1.5, "
                   "AMP, 1x A100-80GB); H100: x1.85 (MLPerf Training v3.0 ResNet-50, "
                   "16x H100 7.8 min vs 16x A100 14.4 min)"))
_add(ModelEntry(
    name="vgg16", kind="cnn",
    params=sum(p for p, _ in _VGG16_STAGES),
    params_source="Simonyan & Zisserman 2015, 'Very Deep Convolutional Networks' "
                  "(configuration D, 138 M parameters)",
    batch=128, batch_note="128 images/GPU",
    flops_per_sample=6 * sum(m for _, m in _VGG16_STAGES), achieved=_CNN_ACHIEVED,
    stages=_VGG16_STAGES,
    compute_source="FLOPs (15.47 GMAC/image) at the achieved FLOP/s of the measured "
                   "ResNet-50 runs (assumption: same efficiency as ResNet-50)"))
_add(ModelEntry(
    name="bert-large", kind="transformer",
    params=_BERT_PARAMS,
    params_source="Devlin et al. 2019, 'BERT' (BERT-LARGE: 24 layers, hidden 1024, 340 M)",
    batch=256, seq_len=128, layers=24, hidden=1024,
    batch_note="256 sequences of 128 tokens/GPU (pre-training phase 1)",
    flops_per_sample=_lm_flops(_BERT_PARAMS, 128),
    achieved={"A100": _BERT_ACHIEVED_A100, "H100": _BERT_ACHIEVED_A100 * _LLM_H100_SPEEDUP},
    compute_source="A100: 580 seq/s measured (NVIDIA DeepLearningExamples BERT, phase 1, "
                   "AMP, 1x A100-80GB); H100: x(989.4*0.40)/(312*0.437) from the LLM MFUs"))
_add(ModelEntry(
    name="gpt2-1.5b", kind="transformer",
    params=1542e6,
    params_source="Radford et al. 2019, 'Language Models are Unsupervised Multitask "
                  "Learners', Table 2 (1542 M, 48 layers, d_model 1600)",
    batch=8, seq_len=1024, layers=48, hidden=1600,
    batch_note="8 sequences of 1024 tokens/GPU",
    flops_per_sample=_lm_flops(1542e6, 1024), achieved=_lm_achieved(),
    compute_source="6*N*tokens at MFU 0.437 (A100, LLaMA-7B run) / 0.40 (H100, Llama 3 run)"))
_add(ModelEntry(
    name="gpt3-13b", kind="transformer",
    params=13.0e9,
    params_source="Brown et al. 2020, 'Language Models are Few-Shot Learners', Table 2.1 "
                  "(GPT-3 13B: 40 layers, d_model 5140, context 2048)",
    batch=16, microbatch=1, seq_len=2048, layers=40, hidden=5140, tp=8,
    batch_note="16 sequences of 2048 tokens per TP group (16 micro-batches of 1)",
    flops_per_sample=_lm_flops(13.0e9, 2048), achieved=_lm_achieved(),
    compute_source="6*N*tokens at MFU 0.437 (A100) / 0.40 (H100)",
    parallel_note="TP=8 inside a host (Megatron all-reduces, 2 per layer and pass), DP "
                  "across hosts"))
_add(ModelEntry(
    name="gpt3-175b", kind="transformer",
    params=175.0e9,
    params_source="Brown et al. 2020, Table 2.1 (GPT-3 175B: 96 layers, d_model 12288)",
    batch=64, microbatch=1, seq_len=2048, layers=96, hidden=12288, tp=8, pp=8,
    batch_note="64 sequences of 2048 tokens per pipeline replica (64 micro-batches of 1)",
    flops_per_sample=_lm_flops(175.0e9, 2048),
    achieved=_lm_achieved(mfu_a100=140e12 * 0.75 / 312e12),
    compute_source="A100: Narayanan et al. 2021 (Megatron-LM, SC'21): 140 TFLOP/s/GPU for "
                   "GPT-3 175B counting activation recomputation -> x3/4 = 105 TFLOP/s of "
                   "model FLOPs; H100: MFU 0.40",
    parallel_note="TP=8 inside a host, PP=8 stages (send/recv of activations), DP across "
                  "replicas (Narayanan et al. 2021 used TP=8 x PP=8 for this size)"))
_add(ModelEntry(
    name="llama-7b", kind="transformer",
    params=6.74e9,
    params_source="Touvron et al. 2023, 'LLaMA', Table 2 (6.7 B: 32 layers, dim 4096)",
    batch=4, microbatch=1, seq_len=2048, layers=32, hidden=4096, tp=2,
    batch_note="4 sequences of 2048 tokens per TP group (4 micro-batches of 1)",
    flops_per_sample=_lm_flops(6.74e9, 2048), achieved=_lm_achieved(),
    compute_source="6*N*tokens at MFU 0.437 (A100: this model's own run, Touvron et al. "
                   "2023 Table 15) / 0.40 (H100)",
    parallel_note="TP=2 inside a host (as in AICB's LLaMA-7B Megatron config), DP across"))
_add(ModelEntry(
    name="mixtral-8x7b", kind="moe",
    params=46.7e9, active_params=12.9e9,
    # experts: 32 layers x 8 experts x 3 matrices of 4096 x 14336
    expert_params=32 * 8 * 3 * 4096 * 14336, experts=8, top_k=2,
    params_source="Jiang et al. 2024, 'Mixtral of Experts' (46.7 B total, 12.9 B active per "
                  "token; 32 layers, dim 4096, FFN 14336, 8 experts, top-2)",
    batch=4, microbatch=1, seq_len=4096, layers=32, hidden=4096, tp=2, ep=8,
    batch_note="4 sequences of 4096 tokens per TP group (4 micro-batches of 1)",
    flops_per_sample=_lm_flops(12.9e9, 4096), achieved=_lm_achieved(),
    compute_source="6*active params*tokens at the dense MFUs (assumption: MoE runs usually "
                   "reach a lower MFU, so this is optimistic)",
    parallel_note="TP=2 inside a host, EP=8 over consecutive DP replicas (token all-to-all, "
                  "2 per layer and pass), DP for the non-expert weights, expert-DP for the "
                  "experts"))


# ---------------------------------------------------------------------------

def list_models() -> List[str]:
    """Zoo names plus the shipped SimAI workloads ('simai:<name>')."""
    from .simai import ALIASES
    return sorted(MODELS) + [f"simai:{a}" for a in sorted(ALIASES)]


def _known_gpus() -> str:
    return ", ".join(sorted(PEAK_FLOPS))


def _parse_model(model: str) -> Tuple[str, Dict[str, str]]:
    toks = model.split()
    if not toks:
        raise KeyError(f"empty model name; known: {', '.join(list_models())}")
    opts: Dict[str, str] = {}
    for t in toks[1:]:
        k, eq, v = t.partition("=")
        if not eq or not v:
            raise ValueError(f"model option {t!r} is not key=value")
        opts[k.lower()] = v
    return toks[0], opts


def _int_opt(opts: Dict[str, str], key: str, default: int) -> int:
    if key not in opts:
        return default
    try:
        v = int(opts[key])
    except ValueError:
        raise ValueError(f"model option {key} must be a positive integer, got {opts[key]!r}") from None
    if v < 1:
        raise ValueError(f"model option {key} must be a positive integer, got {v}")
    return v


def profile_for(model: str, workers: int, gpu: str) -> Profile:
    """Per-iteration profile of ``model`` trained on ``workers`` GPUs of class ``gpu``.

    KeyError for an unknown model or GPU (message lists the known ones); ValueError when the
    worker count does not fit the model's parallelism or an option is malformed."""
    name, opts = _parse_model(model)
    if gpu not in PEAK_FLOPS:
        raise KeyError(f"no compute times for GPU {gpu!r} (known: {_known_gpus()})")
    if name.lower().startswith("simai:"):
        return _simai_profile(name[len("simai:"):], opts, workers, gpu)
    key = name.lower()
    if key not in MODELS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(list_models())}")
    e = MODELS[key]
    unknown = set(opts) - {"tp", "pp", "ep", "grad"}
    if unknown:
        raise ValueError(f"unknown model option(s) {', '.join(sorted(unknown))} "
                         f"(known: tp, pp, ep, grad)")
    tp, pp, ep = _int_opt(opts, "tp", e.tp), _int_opt(opts, "pp", e.pp), _int_opt(opts, "ep", e.ep)
    grad = opts.get("grad", "bf16" if e.kind != "cnn" else "fp16").lower()
    if grad not in _GRAD_BYTES:
        raise ValueError(f"model option grad must be one of {', '.join(_GRAD_BYTES)}, got {grad!r}")
    return build_profile(e, workers, gpu, tp=tp, pp=pp, ep=ep, grad_bytes=_GRAD_BYTES[grad])


def iteration_compute_s(e: ModelEntry, gpu: str, tp: Optional[int] = None,
                        pp: Optional[int] = None) -> float:
    """Compute seconds per iteration on one GPU (the GPU's share of its replica's batch)."""
    tp = e.tp if tp is None else tp
    pp = e.pp if pp is None else pp
    return e.batch * e.flops_per_sample / (tp * pp) / e.achieved[gpu]


def build_profile(e: ModelEntry, workers: int, gpu: str, tp: int = 1, pp: int = 1, ep: int = 1,
                  grad_bytes: int = 2) -> Profile:
    if e.kind == "cnn" and (tp > 1 or pp > 1 or ep > 1):
        raise ValueError(f"{e.name} is data-parallel only (tp/pp/ep must be 1)")
    if e.kind != "moe" and ep > 1:
        raise ValueError(f"{e.name} has no experts (ep must be 1)")
    if e.layers and pp > e.layers:
        raise ValueError(f"{e.name} has {e.layers} layers, cannot split into pp={pp} stages")
    if e.kind == "moe" and e.experts % ep:
        raise ValueError(f"{e.name} has {e.experts} experts, not divisible by ep={ep}")
    if workers % (tp * pp):
        raise ValueError(f"{e.name} with TP={tp} x PP={pp} needs a multiple of {tp * pp} "
                         f"workers, got {workers}")
    dp = workers // (tp * pp)
    if dp % ep:
        raise ValueError(f"{e.name} with TP={tp} x PP={pp} x EP={ep} needs a multiple of "
                         f"{tp * pp * ep} workers, got {workers}")

    compute = iteration_compute_s(e, gpu, tp, pp)
    m = e.micro_batches
    g_tp = Group(size=tp, stride=1)
    g_dp = Group(size=dp, stride=tp)
    phases: list = [Compute(op="compute", seconds=compute / 3)]

    act = e.batch * e.seq_len * e.hidden * 2          # bf16 activations of the replica's batch
    layers_here = e.layers // pp if e.layers else 0
    tp_bytes = 2 * layers_here * act if tp > 1 else 0.0
    a2a = 0.0
    if e.kind == "moe" and ep > 1:
        # per-rank send buffer of one dispatch/combine: its tokens x top-k x hidden x 2 bytes
        a2a = 2 * layers_here * (e.batch * e.seq_len / tp) * e.top_k * e.hidden * 2
    pp_bytes = act if pp > 1 else 0.0

    def model_parallel() -> None:  # blocking TP / MoE / pipeline traffic of one pass
        if tp_bytes:
            phases.append(Collective(op="allreduce", bytes=tp_bytes, group=g_tp))
        if a2a:
            phases.append(Collective(op="alltoall", bytes=a2a, group=Group(size=ep, stride=tp)))
        if pp_bytes:
            phases.append(Collective(op="sendrecv", bytes=pp_bytes,
                                     group=Group(size=pp, stride=tp * dp)))

    model_parallel()  # forward pass
    model_parallel()  # backward pass (activation gradients)
    phases.append(Compute(op="compute", seconds=compute * 2 / 3))

    if e.stages:
        overlap = _overlap_from_stages(e.stages)
    else:
        overlap = 0.5  # uniform stack: gradients ready evenly through the backward pass
    overlap = round(overlap / m, 6)
    dense = e.params - e.expert_params
    phases.append(Collective(op="allreduce", bytes=dense / (tp * pp) * grad_bytes, group=g_dp,
                             overlap=overlap))
    if e.expert_params:
        phases.append(Collective(op="allreduce",
                                 bytes=e.expert_params / (tp * pp * ep) * grad_bytes,
                                 group=Group(size=dp // ep, stride=tp * ep), overlap=overlap))
    return Profile(phases=phases)


def _simai_profile(name: str, opts: Dict[str, str], workers: int, gpu: str) -> Profile:
    from .simai import import_file, resolve_name
    if opts:
        raise ValueError(f"SimAI workloads take no options (got {', '.join(sorted(opts))})")
    path = resolve_name(name)
    # The shipped files' compute times are labelled A100 (AICB); other GPUs are scaled by the
    # same transformer speed-up the zoo uses.
    scale = 1.0 if gpu == "A100" else (1.0 / _LLM_H100_SPEEDUP if gpu == "H100" else 1.0)
    return import_file(path, workers, compute_scale=scale)
