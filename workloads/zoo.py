"""Model zoo (placeholder until the zoo lands): profiles by model name."""
from .scenario import Profile


def profile_for(model: str, workers: int, gpu: str) -> Profile:
    raise KeyError(f"unknown model {model!r}")
