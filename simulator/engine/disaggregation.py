"""Prefill/decode disaggregation: two pools of replicas and the KV transfer between them.

The flow is vLLM's disaggregated serving with a pull connector (NIXL) behind its proxy
(docs/disaggregation-semantics.md): the proxy sends each request to a prefill replica with
max_tokens 1 (rule D1); when that finishes, the prefill replica keeps the request's blocks (D3)
and the proxy sends the request on to a decode replica, which allocates blocks for the prompt,
pulls the KV over the link and only then computes the prompt's last token and decodes (D2, D4).
The client's first token is the decode replica's first token, so TTFT includes both queues, the
prefill and the transfer.
"""
from __future__ import annotations

from dataclasses import dataclass

from simulator.core.request import Request
from simulator.engine.routing import Router, make_router

PREFILL, DECODE = "prefill", "decode"


@dataclass(frozen=True)
class KVLink:
    """The link a pull crosses: each decode rank reads its own share of the heads from the
    prefill ranks over its own link, so the ranks' transfers run side by side."""
    bandwidth_Bps: float    # one direction, per GPU
    latency_s: float        # per transfer: set-up and the completion notice

    def transfer_time_s(self, num_bytes: float) -> float:
        """One pull of ``num_bytes`` per rank: the latency, then the bytes at the link's rate."""
        return self.latency_s + num_bytes / self.bandwidth_Bps


@dataclass(frozen=True)
class PoolPlan:
    """What the engine needs of a disaggregated run: how many replicas each pool has (prefill
    first, then decode, in the simulation's replica list), the link, and the KV bytes per token
    per decode rank."""
    num_prefill: int
    num_decode: int
    link: KVLink
    kv_bytes_per_token: int

    def pool_of(self, index: int) -> str:
        return PREFILL if index < self.num_prefill else DECODE

    def pull_time_s(self, num_tokens: int) -> float:
        return self.link.transfer_time_s(num_tokens * self.kv_bytes_per_token)


class Transfers:
    """The hand-over of each request from the prefill pool to the decode pool and its KV pull.

    ``replicas``: the simulation's, prefill pool first; each pool has its own router (round
    robin's turn counts the pool's own requests)."""

    def __init__(self, plan: PoolPlan, replicas: list, router: Router):
        self.plan = plan
        self.decode_pool = replicas[plan.num_prefill:]
        self.decode_router = make_router(router.name, router.load_bound)
        self._pending: dict[Request, tuple] = {}   # prefill copy -> (its replica, the request)
        self._pulling: dict[Request, tuple] = {}   # request -> (the prefill replica, its copy)
        self.num_pulls, self.pull_s_sum = 0, 0.0

    @staticmethod
    def prefill_copy(request: Request) -> Request:
        """What the proxy sends a prefill replica: the prompt with max_tokens 1, its blocks kept
        after it finishes for the decode side to read (rule D1)."""
        return Request(request.request_id, request.arrival_s, request.num_prompt_tokens, 1,
                       prompt_token_ids=request.prompt_token_ids, priority=request.priority,
                       do_remote_decode=True)

    def sent(self, copy: Request, replica, request: Request) -> None:
        """``copy`` of ``request`` went to the prefill ``replica``."""
        self._pending[copy] = (replica, request)

    def hand_over(self, copy: Request) -> Request:
        """The prefill replica finished ``copy``: its request goes to a decode replica, which
        pulls the prompt's KV (its blocks wait on the prefill side meanwhile, rule D3); its
        queueing ended when the copy was first scheduled (rule D2)."""
        prefill, request = self._pending.pop(copy)
        prefill.num_transfers += 1
        request.scheduled_s = copy.scheduled_s
        request.do_remote_prefill = True
        self._pulling[request] = (prefill, copy)
        return request

    def pull(self, env, decode, request: Request):
        """One pull, started now: whole blocks the decode replica allocated, less its own prefix
        hits (NIXL reads block by block, rule D3). Returns the SimPy process that waits for it."""
        kv = decode.scheduler.kv
        tokens = kv.num_blocks_of(request) * kv.block_size - request.num_cached_tokens
        duration_s = self.plan.pull_time_s(tokens)
        decode.num_transfers += 1   # from now: the replica may idle, it is not stalled
        self.num_pulls += 1
        self.pull_s_sum += duration_s
        return self._arrive(env, decode, request, duration_s)

    def _arrive(self, env, decode, request: Request, duration_s: float):
        """The pull's end: the prefill side frees the blocks, the decode side counts them
        computed (rule D4), and both look again."""
        yield env.timeout(duration_s)
        prefill, copy = self._pulling.pop(request)
        prefill.scheduler.finish_sending(copy)
        decode.scheduler.finish_receiving(request)
        prefill.num_transfers -= 1
        decode.num_transfers -= 1
        prefill.notify()
        decode.notify()

    def figures(self) -> dict:
        """summary.json's KV transfer figures."""
        mean_ms = self.pull_s_sum / self.num_pulls * 1000 if self.num_pulls else 0.0
        return {"num_kv_transfers": self.num_pulls, "mean_kv_transfer_ms": mean_ms}
