"""vLLM V1's priority waiting queue [RQ]: a min-heap on (priority, arrival time).

Exposes the deque operations the schedulers use, so FCFS keeps its deque and the priority policy
swaps this in: "prepend" (a preempted request going back) is just a push, as in vLLM.
"""
from __future__ import annotations

import heapq
import itertools

from simulator.request import Request


class PriorityRequestQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, Request]] = []
        self._order = itertools.count()   # ties keep insertion order, deterministically

    def append(self, request: Request) -> None:
        heapq.heappush(self._heap, (request.priority, request.arrival_s, next(self._order), request))

    appendleft = append

    def popleft(self) -> Request:
        return heapq.heappop(self._heap)[3]

    def __getitem__(self, index: int) -> Request:
        if index != 0:
            raise IndexError("a priority queue only exposes its head")
        return self._heap[0][3]

    def remove(self, request: Request) -> None:
        self._heap = [item for item in self._heap if item[3] is not request]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __iter__(self):
        return (item[3] for item in sorted(self._heap))
