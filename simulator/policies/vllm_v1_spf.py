"""vLLM V1 with shortest-prompt-first admission: the example of a new waiting order.

Everything is vLLM V1's (simulator/policies/vllm_v1.py) but the waiting queue: the request with
the fewest prompt tokens is admitted first (ties: earlier arrival), and a preempted request goes
back by the same key. The queue is the one place the admission order lives, so the step-by-step
path and the fast paths follow it alike.
"""
from __future__ import annotations

from simulator.core.request import Request
from simulator.policies.queues import OrderedQueue
from simulator.policies.registry import register_scheduler
from simulator.policies.vllm_v1 import VllmV1Scheduler


class ShortestPromptFirstQueue(OrderedQueue):
    @staticmethod
    def key(request: Request) -> tuple:
        return request.num_prompt_tokens, request.arrival_s


@register_scheduler("vllm_v1_spf", description="vLLM V1 with shortest-prompt-first admission "
                    "(the waiting queue ordered by prompt length)")
class ShortestPromptFirstScheduler(VllmV1Scheduler):
    def make_waiting_queue(self):
        return ShortestPromptFirstQueue()
