"""Tunable constants of Harmonics (module attributes, read at run time: tests patch them)."""
# the closed-form proxy of large groups (LocalScheduler._proxy): a job's free fraction below
# the higher classes is floored at this (under saturated higher classes it is scored
# 1/PROXY_FREE_MIN slower); "product": the free fractions of its links multiply, "max": its
# worst link alone (the default; measured side by side in docs/harmonics.md)
PROXY_FREE_MIN = 0.05
PROXY_BLOCK = "max"
# relative slack of the lower bound of a job's slowdown (LocalScheduler._lb): the model
# detects a completion at 1e-9 of the remaining work, so an iteration may end a hair early
LB_MARGIN = 1e-6
USE_BOUND = True     # the lower-bound pruning of LocalScheduler._solve_group (exact)
# phase stage: a job slowed by more than this (its slowdown - 1) is also offered every class
# with every phase ("probe"): it may do better tied with a neighbour at another phase than
# below it (comm-heavy jobs that never fit in the higher job's gaps)
PROBE_MIN = 0.05
# proposal stage: a halo group is searched only if one of its jobs (a ghost included) is slowed
# by more than this in the halo view (the probe's threshold)
PROPOSE_MIN = PROBE_MIN
SCREEN_BOUND = True  # ... also before screening runs (changes which options reach the top)
# the proxy scores a large group's summary candidates in batches of at most this many
PROXY_CHUNK = 64
# the guard: a Local Scheduler's solve, and the Coordinator over a component, never keep a
# plan their view scores worse than fair sharing's
GUARD = True
