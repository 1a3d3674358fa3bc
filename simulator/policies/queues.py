"""Waiting queues: the order in which a policy considers waiting requests for admission [RQ].

A queue is the one place a policy's admission order lives: every path reads the head through
``peek`` and takes it with ``pop``. New requests are ``push``ed; a preempted request goes back
with ``push_preempted`` (the head of an FCFS deque; an ordered queue just pushes it, as vLLM's
priority queue does). A new ordering is a subclass of ``OrderedQueue`` with its own ``key``.
"""
from __future__ import annotations

import heapq
import itertools
from collections import deque

from simulator.core.request import Request


class FCFSQueue(deque):
    """vLLM's default: a deque in arrival order; preempted requests go back to the head."""

    push = deque.append
    push_preempted = deque.appendleft
    pop = deque.popleft

    def peek(self) -> Request:
        return self[0]


class OrderedQueue:
    """A min-heap on ``key(request)``; ties keep insertion order, deterministically."""

    def __init__(self) -> None:
        self._heap: list[tuple] = []
        self._order = itertools.count()

    @staticmethod
    def key(request: Request) -> tuple:
        raise NotImplementedError

    def push(self, request: Request) -> None:
        heapq.heappush(self._heap, (self.key(request), next(self._order), request))

    push_preempted = push

    def peek(self) -> Request:
        return self._heap[0][2]

    def pop(self) -> Request:
        return heapq.heappop(self._heap)[2]

    def remove(self, request: Request) -> None:
        self._heap = [item for item in self._heap if item[2] is not request]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __iter__(self):
        return (item[2] for item in sorted(self._heap))


def priority_order(request: Request) -> tuple:
    """vLLM V1's priority order (``Request.__lt__``): priority, then arrival time, then request
    id. Ids follow submission order, so requests that arrive at the same instant (a burst) are
    ordered as a real engine, which stamps each with its own arrival time, would order them."""
    return request.priority, request.arrival_s, request.request_id


class PriorityQueue(OrderedQueue):
    """vLLM V1's ``priority`` policy: the lowest ``priority_order`` first."""

    key = staticmethod(priority_order)
