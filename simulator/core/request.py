"""A request's state as the scheduler sees it (vLLM V1's vocabulary)."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"
    # P/D: blocks allocated, the prompt's KV still on its way from a prefill instance (vLLM's name)
    WAITING_FOR_REMOTE_KVS = "waiting_for_remote_kvs"


@dataclass(eq=False, slots=True)  # identity-hashed (dict keys); slots: millions are made
class Request:
    request_id: int
    arrival_s: float
    num_prompt_tokens: int
    max_output_tokens: int
    prompt_token_ids: tuple[int, ...] | None = None
    priority: int = 0

    num_computed_tokens: int = 0     # C: tokens whose KV is (or is being) computed
    num_output_tokens: int = 0
    num_output_placeholders: int = 0  # async scheduling: tokens in flight, not yet sampled
    num_stale_samples: int = 0        # async: tokens in flight at a preemption, to be discarded
    num_spec_tokens: int = 0          # speculative decoding: drafts proposed, not yet scheduled
    num_scheduled_spec_tokens: int = 0   # drafts the step in flight verifies
    status: RequestStatus = RequestStatus.WAITING
    running_seq: int = 0                  # order of (re-)entry into the running list
    num_preemptions: int = 0
    scheduled_s: float | None = None      # first admission (queueing ends)
    first_token_s: float | None = None
    last_token_s: float | None = None
    finish_s: float | None = None
    num_cached_tokens: int = 0            # prefix-cache hits at (last) admission
    client_queue_s: float = 0.0           # time held by the client concurrency limit (not in TTFT)
    # Inter-token gaps are summarised, not stored per token, so memory does not grow with tokens.
    # Their sum needs no field: it is last_token_s - first_token_s (see itl_sum_s).
    max_itl_s: float = 0.0
    itl_sq_sum_s2: float = 0.0
    itl_gaps_s: list[float] | None = field(default=None, repr=False)  # kept only when asked
    # P/D disaggregation, as vLLM's kv_transfer_params name them: a decode instance pulls this
    # request's prompt KV (do_remote_prefill); a prefill instance keeps its blocks for the pull
    # after it finishes (do_remote_decode).
    do_remote_prefill: bool = False
    do_remote_decode: bool = False

    @property
    def num_tokens(self) -> int:
        """Prompt plus outputs so far: what a (re-)prefill must cover."""
        return self.num_prompt_tokens + self.num_output_tokens

    @property
    def num_remaining_tokens(self) -> int:
        """Tokens to schedule before this request samples again (1 for a decode)."""
        return self.num_tokens - self.num_computed_tokens

    @property
    def itl_sum_s(self) -> float:
        """The sum of this request's inter-token gaps: they telescope to last - first token."""
        return 0.0 if self.first_token_s is None else self.last_token_s - self.first_token_s

    @property
    def is_prefill(self) -> bool:
        return self.num_remaining_tokens > 1 or self.num_output_tokens == 0

    @property
    def is_finished(self) -> bool:
        return self.status is RequestStatus.FINISHED

    def record_token(self, now_s: float) -> None:
        """One output token sampled at ``now_s`` (the end of the step that produced it)."""
        self.record_tokens(1, now_s, now_s, 0.0, 0.0, ())

    def record_tokens(self, count: int, first_s: float, last_s: float, later_sq_sum_s2: float,
                      later_max_s: float, later_gaps_s) -> None:
        """``count`` output tokens, one per step end, the first at ``first_s`` and the last at
        ``last_s``: a token's time is the end of the step that samples it, and an inter-token
        gap is the time since the request's previous token. ``later_*``: the gaps between the
        ``count`` tokens themselves (their sum of squares, largest, and the gaps, read only when
        this request keeps them), which a decode cohort has summed for all its members."""
        if self.first_token_s is None:
            self.first_token_s = first_s
        else:
            gap = first_s - self.last_token_s
            self.itl_sq_sum_s2 += gap * gap + later_sq_sum_s2
            self.max_itl_s = max(self.max_itl_s, gap, later_max_s)
            if self.itl_gaps_s is not None:
                self.itl_gaps_s.append(gap)
                self.itl_gaps_s.extend(later_gaps_s)
        self.last_token_s = last_s
        self.num_output_tokens += count

    def record_chunk(self, count: int, now_s: float) -> None:
        """``count`` output tokens sampled together at ``now_s`` (a verify step's accepted drafts
        and its bonus token): one chunk to the client, so one inter-token gap (metrics §7)."""
        self.record_tokens(count, now_s, now_s, 0.0, 0.0, ())

    def reset_for_recompute(self) -> None:
        """Recompute preemption: KV is dropped, outputs are kept and re-prefilled on resume;
        drafts are dropped with the KV (speculative rule S5)."""
        self.num_computed_tokens = 0
        self.num_spec_tokens = self.num_scheduled_spec_tokens = 0
        self.num_stale_samples += self.num_output_placeholders   # computed on the dropped KV
        self.num_output_placeholders = 0
        self.status = RequestStatus.PREEMPTED
        self.num_preemptions += 1
