"""The job-profile part of the scenario schema: the phases an iteration runs (compute and
collectives), the error type every schema module raises, and byte counts.

Kept apart from ``workloads.scenario`` so that the profile zoo and the importers (SimAI,
ASTRA-sim), which ``scenario.resolve`` calls, build profiles without importing it back.
"""
from __future__ import annotations

import math
import re
from typing import Annotated, Any, List, Literal, Optional, Union

from pydantic import (BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveInt,
                      field_validator)


# every character str.splitlines() breaks at, shown escaped in messages
_LINE_BREAKS = {ord(c): repr(c)[1:-1] for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}


def one_line(text: str) -> str:
    """``text`` with its line breaks escaped (input from files may hold any character)."""
    return text.translate(_LINE_BREAKS)


class ScenarioError(ValueError):
    """A scenario that is malformed or impossible.  str() is one line naming the field."""

    def __str__(self) -> str:
        return one_line(super().__str__())


_UNITS = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(v: Any) -> float:
    """Bytes from a number or a string such as '25MB', '1.5 GiB', '4e6'."""
    if isinstance(v, bool):
        raise ValueError("must be a byte count")
    if isinstance(v, (int, float)):
        b = float(v)
    elif isinstance(v, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*", v)
        if not m or m.group(2).lower() not in _UNITS:
            raise ValueError(f"not a byte count: {v!r} (use a number or e.g. '25MB', '1GiB')")
        b = float(m.group(1)) * _UNITS[m.group(2).lower()]
    else:
        raise ValueError(f"not a byte count: {v!r}")
    if not math.isfinite(b) or b < 0:
        raise ValueError(f"must be a non-negative byte count (got {v!r})")
    return b


Bytes = Annotated[float, Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Group(_Strict):
    """Which ranks of the job take part together.  Ranks are partitioned into groups of
    ``size`` members spaced ``stride`` apart (tensor-parallel groups: stride 1; data-parallel
    groups of a TP x DP job: stride = TP size).  Default: all ranks, one group."""
    size: Optional[PositiveInt] = None
    stride: PositiveInt = 1


class Compute(_Strict):
    op: Literal["compute"]
    seconds: NonNegativeFloat


CollectiveOp = Literal["allreduce", "allgather", "reducescatter", "alltoall", "sendrecv", "broadcast"]


class Collective(_Strict):
    """A collective of ``bytes`` (the full buffer: reduced/gathered size; per-rank send
    buffer for all-to-all; the message for send/recv and broadcast)."""
    op: CollectiveOp
    bytes: Bytes
    group: Group = Group()
    overlap: float = Field(0.0, ge=0.0, le=1.0,
                           description="fraction of the preceding compute phase it may run alongside")

    @field_validator("bytes", mode="before")
    @classmethod
    def _b(cls, v):
        return parse_bytes(v)


Phase = Annotated[Union[Compute, Collective], Field(discriminator="op")]


class Profile(_Strict):
    phases: List[Phase] = Field(min_length=1)

    @property
    def compute_s(self) -> float:
        return sum(p.seconds for p in self.phases if isinstance(p, Compute))

    @property
    def collectives(self) -> List[Collective]:
        return [p for p in self.phases if isinstance(p, Collective)]
