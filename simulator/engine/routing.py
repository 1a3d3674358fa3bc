"""Routers: which replica an arriving request goes to (engine.router), one interface.

A router is a class registered by name with ``pick(request, replicas) -> index``; it may keep
state (round robin's turn) and reads each replica's scheduler and KV cache, changing nothing.
Ties go to the lowest replica index, so a run is deterministic.

- ``round_robin``: request k (in sending order) to replica k mod N.
- ``least_loaded``: fewest unfinished requests (waiting + running), the closest servesim has to
  vLLM's data-parallel balancing (simulator/validate/engine_settings.py), kept under its name.
- ``least_tokens``: fewest queued + running tokens (``load_tokens``).
- ``least_kv``: fewest used KV blocks.
- ``prefix_affinity``: the longest cached prefix of the request (``cached_prefix_tokens``), among
  replicas with at most ``load_bound`` more unfinished requests than the least loaded one; ties
  (a new prefix everywhere) go to the least loaded.
"""
from __future__ import annotations

from typing import ClassVar

from simulator.core.request import Request
from simulator.fastpath.cohort import DecodeCohort
from simulator.kv.block_hashes import BlockHashes

DEFAULT_LOAD_BOUND = 4   # unfinished requests above the least loaded replica's (prefix_affinity)
ROUTERS: dict[str, type["Router"]] = {}


def register(cls: type["Router"]) -> type["Router"]:
    ROUTERS[cls.name] = cls
    return cls


def router_names() -> tuple[str, ...]:
    return tuple(ROUTERS)


class Router:
    name: ClassVar[str]

    def __init__(self, load_bound: int = DEFAULT_LOAD_BOUND):
        self.load_bound = load_bound

    def pick(self, request: Request, replicas: list) -> int:
        raise NotImplementedError


def make_router(name: str, load_bound: int | None = None) -> Router:
    """The router registered as ``name`` (the scenario model allows only registered names)."""
    return ROUTERS[name](DEFAULT_LOAD_BOUND if load_bound is None else load_bound)


def router_for(engine) -> Router:
    """The router an EngineOptions asks for: engine.router with engine.router_load_bound."""
    return make_router(engine.router, engine.router_load_bound)


def _argmin(values: list) -> int:
    """The index of the smallest value, the lowest such index on ties."""
    return min(range(len(values)), key=values.__getitem__)


def load_tokens(replica) -> int:
    """Queued + running tokens: the num_tokens (prompt plus outputs so far) of every waiting and
    running request; the decode cohort's members (stale fields) from its context total."""
    scheduler, stepper = replica.scheduler, replica.stepper
    tokens = sum(r.num_tokens for r in scheduler.waiting) + sum(r.num_tokens for r in scheduler.running)
    if isinstance(stepper, DecodeCohort) and stepper.members:
        count, context, _ = stepper.decode_rows()
        tokens += context + count   # a decoder has computed all its tokens but the last sampled
    return tokens


@register
class RoundRobin(Router):
    name = "round_robin"

    def __init__(self, load_bound: int = DEFAULT_LOAD_BOUND):
        super().__init__(load_bound)
        self._turn = 0

    def pick(self, request: Request, replicas: list) -> int:
        index = self._turn % len(replicas)
        self._turn = index + 1
        return index


@register
class LeastLoaded(Router):
    name = "least_loaded"

    def pick(self, request: Request, replicas: list) -> int:
        return _argmin([r.scheduler.num_unfinished for r in replicas])


@register
class LeastTokens(Router):
    name = "least_tokens"

    def pick(self, request: Request, replicas: list) -> int:
        return _argmin([load_tokens(r) for r in replicas])


@register
class LeastKV(Router):
    name = "least_kv"

    def pick(self, request: Request, replicas: list) -> int:
        return _argmin([r.scheduler.kv.num_used_blocks for r in replicas])


@register
class PrefixAffinity(Router):
    name = "prefix_affinity"

    def pick(self, request: Request, replicas: list) -> int:
        loads = [r.scheduler.num_unfinished for r in replicas]
        bound = min(loads) + self.load_bound
        # One scratch chain for every replica asked: the request is hashed once, and no
        # replica's own hash table learns of a request it may never serve.
        hashes = BlockHashes(replicas[0].scheduler.kv.block_size)
        best, best_key = 0, None
        for index, replica in enumerate(replicas):
            if loads[index] > bound:
                continue
            key = (replica.scheduler.kv.cached_prefix_tokens(request, hashes), -loads[index])
            if best_key is None or key > best_key:
                best, best_key = index, key
        return best


def replica_summaries(replicas: list, num_routed: list[int]) -> list[dict]:
    """summary.json's per-replica list: requests routed there, preemptions and prefix-cache
    counts, read from each replica's scheduler at the end of the run."""
    rows = []
    for replica, routed in zip(replicas, num_routed):
        scheduler, kv = replica.scheduler, replica.scheduler.kv
        queries, hits = kv.num_queries_tokens, kv.num_hit_tokens
        rows.append({"replica": replica.index, **({"pool": replica.pool} if replica.pool else {}),
                     "num_requests": routed,
                     "num_preemptions": scheduler.num_preemptions,
                     "prefix_cache_queries": queries, "prefix_cache_hits": hits,
                     "prefix_cache_hit_rate": hits / queries if queries else 0.0})
    return rows
