"""Routers across replicas (simulator/engine/routing.py): each one's rule on hand-built replicas,
and whole runs where the rule decides where every request goes."""
from __future__ import annotations

import pytest

from simulator.runner import execution as runner
from simulator.core.request import Request
from simulator.engine.routing import (ROUTERS, LeastTokens, load_tokens, make_router,
                                      replica_summaries)
from simulator.engine.replica import Replica
from simulator.fastpath.cohort import DecodeCohort
from simulator.runner import prepare, simulate
from simulator.scenario import ScenarioError, validate_scenario
from tests.sched_helpers import Driver, make_scheduler

SHARED = list(range(1000, 1040))     # 40 tokens: 2 full blocks of 16 + 8
RAW = {"name": "routing", "model": "llama-2-7b", "hardware": "a100-80gb", "cost_model": {"kind": "unit"},
       "engine": {"num_gpu_blocks": 1000, "max_model_len": 256, "num_replicas": 2},
       "workload": {"arrival": {"kind": "inf"}, "prompt_len": {"kind": "fixed", "value": 16},
                    "output_len": {"kind": "fixed", "value": 8}, "num_requests": 4},
       "schedulers": [{"preset": "vllm_v1"}]}


def replicas(n: int, **options) -> list[Replica]:
    options.setdefault("max_num_seqs", 8)
    options.setdefault("max_num_batched_tokens", 256)
    out = []
    for i in range(n):
        s = make_scheduler("vllm_v1", block_size=16, max_model_len=2048, **options)
        out.append(Replica(i, s, s))
    return out


def ids(rid: int, tokens: list[int], out: int = 4) -> Request:
    return Request(rid, 0.0, len(tokens), out, prompt_token_ids=tuple(tokens))


def test_every_router_is_registered_under_its_name_and_the_scenario_allows_them():
    assert list(ROUTERS) == ["round_robin", "least_loaded", "least_tokens", "least_kv",
                             "prefix_affinity"]
    assert all(make_router(name).name == name for name in ROUTERS)
    assert [validate_scenario({**RAW, "engine": {**RAW["engine"], "router": name}}).engine.router
            for name in ROUTERS] == list(ROUTERS)


def test_a_negative_load_bound_is_refused_naming_the_field():
    with pytest.raises(ScenarioError, match=r"^engine\.router_load_bound: -1"):
        validate_scenario({**RAW, "engine": {**RAW["engine"], "router_load_bound": -1}})


def test_round_robin_sends_request_k_to_replica_k_mod_n():
    router, reps = make_router("round_robin"), replicas(3)
    assert [router.pick(Request(k, 0.0, 4, 1), reps) for k in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_least_loaded_counts_requests_and_least_tokens_counts_their_tokens():
    reps = replicas(3)
    reps[0].scheduler.add(Request(0, 0.0, 1000, 4))                           # 1 request, 1000 tokens
    for k in range(3):
        reps[1].scheduler.add(Request(1 + k, 0.0, 100, 4))                    # 3 requests, 300 tokens
    for k in range(2):
        reps[2].scheduler.add(Request(4 + k, 0.0, 200, 4))                    # 2 requests, 400 tokens
    assert [load_tokens(r) for r in reps] == [1000, 300, 400]
    new = Request(9, 0.0, 10, 1)
    assert make_router("least_loaded").pick(new, reps) == 0
    assert make_router("least_tokens").pick(new, reps) == 1


def test_least_tokens_counts_running_requests_prompt_and_outputs():
    reps = replicas(2)
    d = Driver(reps[0].scheduler)
    d.add(Request(0, 0.0, 30, 10))
    d.step(), d.step(), d.step()                    # prefill, then two decodes: 30 + 3 outputs
    reps[1].scheduler.add(Request(1, 0.0, 34, 4))   # waiting, 34 tokens
    assert [load_tokens(r) for r in reps] == [33, 34]
    assert make_router("least_tokens").pick(Request(2, 0.0, 4, 1), reps) == 0


def test_least_kv_picks_the_fewest_used_blocks_lowest_index_on_ties():
    reps = replicas(3)
    for i, prompt in ((0, 64), (1, 16), (2, 32)):
        d = Driver(reps[i].scheduler)
        d.add(Request(i, 0.0, prompt, 8))
        d.step()
    assert [r.scheduler.kv.num_used_blocks for r in reps] == [4, 1, 2]
    assert make_router("least_kv").pick(Request(5, 0.0, 4, 1), reps) == 1
    assert make_router("least_kv").pick(Request(5, 0.0, 4, 1), replicas(3)) == 0


def cached_on_first(reps: list[Replica]) -> None:
    """Replica 0 serves a request of SHARED to the end: its 2 full blocks stay cached."""
    d = Driver(reps[0].scheduler)
    d.add(ids(0, SHARED))
    d.run()


def test_cached_prefix_tokens_answers_lookup_prefix_without_changing_anything():
    reps = replicas(2, enable_prefix_caching=True)
    cached_on_first(reps)
    kv, new = reps[0].scheduler.kv, ids(1, SHARED + [7, 8])
    before = (kv.num_free_blocks, list(kv._free), dict(kv._hits), len(kv._hashes._chains))
    assert kv.cached_prefix_tokens(new) == 32
    assert reps[1].scheduler.kv.cached_prefix_tokens(new) == 0
    assert (kv.num_free_blocks, list(kv._free), dict(kv._hits), len(kv._hashes._chains)) == before
    assert kv.lookup_prefix(new) == 32       # the same walk, which does store its hits
    assert make_scheduler("vllm_v1").kv.cached_prefix_tokens(new) == 0   # plain KVCache


@pytest.mark.parametrize("bound, expected", [(1, 0), (0, 1)])
def test_prefix_affinity_follows_the_prefix_unless_the_load_bound_is_hit(bound, expected):
    reps = replicas(3, enable_prefix_caching=True)
    cached_on_first(reps)
    reps[0].scheduler.add(Request(5, 0.0, 8, 1))   # replica 0: one unfinished request more
    reps[2].scheduler.add(Request(6, 0.0, 8, 1))
    assert make_router("prefix_affinity", bound).pick(ids(1, SHARED + [7]), reps) == expected
    # A prefix no replica holds goes to the least loaded.
    assert make_router("prefix_affinity", bound).pick(ids(2, [5] * 40), reps) == 1


# -- whole runs ------------------------------------------------------------------------------------
def scenario(router: str, *, bound: int = 4, n: int = 24, sessions: bool = True,
             num_replicas: int = 4):
    workload = {"arrival": {"kind": "poisson", "rate": 4.0},
                "prompt_len": {"kind": "fixed", "value": 40},
                "output_len": {"kind": "fixed", "value": 20}, "num_requests": n}
    if sessions:
        workload["sessions"] = {"num_turns": {"kind": "fixed", "value": 3}, "think_time_s": 0.5,
                                "system_prompt_len": 32}
    return validate_scenario({
        "name": "routing", "seed": 3, "model": "llama-2-7b", "hardware": "a100-80gb",
        "cost_model": {"kind": "unit", "fixed_step_time_s": 0.02},
        "engine": {"num_gpu_blocks": 4000, "block_size": 16, "max_model_len": 1024,
                   "num_replicas": num_replicas, "router": router, "router_load_bound": bound},
        "workload": workload,
        "schedulers": [{"preset": "vllm_v1", "max_num_seqs": 16, "max_num_batched_tokens": 512}]})


@pytest.fixture
def picks(monkeypatch):
    """Every pick of a run: request id -> (replica, unfinished requests per replica then)."""
    seen: dict[int, tuple[int, list[int]]] = {}
    real = runner.router_for

    def recording(engine):
        router = real(engine)
        pick = router.pick

        def record(request, reps):
            index = pick(request, reps)
            seen[request.request_id] = (index, [r.scheduler.num_unfinished for r in reps])
            return index
        router.pick = record
        return router
    monkeypatch.setattr(runner, "router_for", recording)
    return seen


def run(sc, fast_path: bool = True):
    prepared = prepare(sc)
    return prepared, simulate(prepared, prepared.runs[0], fast_path=fast_path)


def test_a_run_round_robins_exactly_and_lists_each_replica(picks):
    _, out = run(scenario("round_robin", sessions=False, n=10))
    assert [picks[k][0] for k in range(10)] == [k % 4 for k in range(10)]
    assert [r["num_requests"] for r in out.summary["replicas"]] == [3, 3, 2, 2]
    assert [r["replica"] for r in out.summary["replicas"]] == [0, 1, 2, 3]
    assert "replicas" not in run(scenario("round_robin", sessions=False, n=4, num_replicas=1))[1].summary


def test_prefix_affinity_keeps_each_conversation_on_the_replica_holding_it(picks):
    prepared, out = run(scenario("prefix_affinity", bound=1000))
    parent = prepared.trace.sessions.parent
    follow_ups = [rid for rid in picks if parent[rid] >= 0]
    assert len(follow_ups) == 48
    assert all(picks[rid][0] == picks[int(parent[rid])][0] for rid in follow_ups)
    _, spread = run(scenario("round_robin"))
    assert out.summary["prefix_cache_hit_rate"] > spread.summary["prefix_cache_hit_rate"] + 0.2
    rows = out.summary["replicas"]
    assert sum(r["num_requests"] for r in rows) == 72
    assert sum(r["prefix_cache_hits"] for r in rows) == out.summary["prefix_cache_hits"]


def test_prefix_affinity_never_passes_the_load_bound(picks):
    prepared, _ = run(scenario("prefix_affinity", bound=1))
    assert all(loads[index] <= min(loads) + 1 for index, loads in picks.values())
    parent = prepared.trace.sessions.parent
    moved = [rid for rid in picks if parent[rid] >= 0 and picks[rid][0] != picks[int(parent[rid])][0]]
    assert moved   # the bound made some turns leave the replica holding their history


def test_least_tokens_sees_the_decode_cohort_as_its_members_fields(monkeypatch):
    # The cohort's members have stale fields; their tokens come from its context total, so the
    # fast path routes exactly as stepping every request does.
    held = []
    pick = LeastTokens.pick

    def watching(self, request, reps):
        held.append(any(isinstance(r.stepper, DecodeCohort) and r.stepper.members for r in reps))
        return pick(self, request, reps)
    monkeypatch.setattr(LeastTokens, "pick", watching)
    sc = scenario("least_tokens", sessions=False, n=60)
    fast = [(r.request_id, r.finish_s) for r in run(sc)[1].requests.rows()]
    assert any(held)
    slow = [(r.request_id, r.finish_s) for r in run(sc, fast_path=False)[1].requests.rows()]
    assert sorted(fast) == sorted(slow)


def test_replica_summaries_read_each_replica():
    reps = replicas(2, enable_prefix_caching=True)
    cached_on_first(reps)
    rows = replica_summaries(reps, [1, 0])
    assert rows[0] == {"replica": 0, "num_requests": 1, "num_preemptions": 0,
                       "prefix_cache_queries": 40, "prefix_cache_hits": 0,
                       "prefix_cache_hit_rate": 0.0}
    assert rows[1]["prefix_cache_queries"] == 0
