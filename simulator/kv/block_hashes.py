"""The token ids a request's KV blocks hold, and their chain hashes (semantics §2.4).

vLLM hashes every full block, prompt or generated: a follow-up turn whose prompt repeats an
earlier prompt and its answer hits the answer's blocks too. servesim samples no tokens, so a
request whose prompt token ids are known is given a deterministic answer: the same prompt, the
same answer (as greedy decoding gives), its ids drawn from the prompt's own hash. A workload that
builds later prompts from earlier answers (multi-turn sessions) calls ``answer_token_ids`` with
the same arguments, so its prompts contain exactly the ids the cache hashed.
"""
from __future__ import annotations

from simulator.core.request import Request

VOCAB_SIZE = 1 << 31   # synthetic ids stay within a signed 32-bit token id
_MIX = 0x9E3779B97F4A7C15   # 2**64 / golden ratio: consecutive positions spread over the ids


def answer_key(prompt_token_ids: tuple[int, ...]) -> int:
    """What a synthetic answer depends on: the whole prompt (Python's hash of a tuple of ints
    is the same in every process)."""
    return hash(prompt_token_ids)


def answer_token_ids(key: int, start: int, stop: int) -> tuple[int, ...]:
    """Generated tokens ``start`` to ``stop - 1`` of the answer to the prompt with this key."""
    return tuple(((key + i) * _MIX >> 17) % VOCAB_SIZE for i in range(start, stop))


class BlockHashes:
    """Each request's chain of full-block hashes, extended lazily as blocks fill: hash(parent,
    that block's token ids), prompt ids first and then its answer's."""

    def __init__(self, block_size: int):
        self.block_size = block_size
        self._chains: dict[Request, list[int]] = {}
        self._answer_keys: dict[Request, int] = {}

    @staticmethod
    def knows_tokens(request: Request) -> bool:
        """Blocks of a request with prompt token ids can be shared; without them, its prompt is
        unlike any other, and so is every block after it."""
        return request.prompt_token_ids is not None

    def num_hashable(self, request: Request) -> int:
        """Its full blocks, prompt and generated, whose tokens are known now."""
        return request.num_tokens // self.block_size if self.knows_tokens(request) else 0

    def hash_of(self, request: Request, index: int) -> int:
        chain = self._chains.setdefault(request, [])
        while len(chain) <= index:
            parent = chain[-1] if chain else None
            chain.append(hash((parent, self._block_tokens(request, len(chain)))))
        return chain[index]

    def _block_tokens(self, request: Request, index: int) -> tuple[int, ...]:
        bs, prompt = self.block_size, request.prompt_token_ids
        start, stop = index * bs, (index + 1) * bs
        if stop <= len(prompt):
            return tuple(prompt[start:stop])
        key = self._answer_keys.get(request)
        if key is None:
            key = self._answer_keys[request] = answer_key(tuple(prompt))
        p = len(prompt)
        head = tuple(prompt[start:stop]) if start < p else ()
        return head + answer_token_ids(key, max(start, p) - p, stop - p)

    def forget(self, request: Request) -> None:
        """A finished request's chain is not needed again."""
        self._chains.pop(request, None)
        self._answer_keys.pop(request, None)
